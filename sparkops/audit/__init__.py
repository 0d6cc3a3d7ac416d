"""The launch configuration audited against the playbook (docs/field-notes.md).

Each check is a small class in `checks.CHECKS` (registered like the alert rules) with DEFAULTS, its
editable thresholds (`sparkops audit --set compile_caps.max_jobs=8`), reading the engines' latest
`ConfigSnapshot`s and returning `Result`s: pass / warn / fail, the evidence line (what the unit
or environment says, and which file said it) and the fix. Advisories are findings, never
firing alerts: they show on the audit page and as a badge on the engine card.

`base`: the check interface, its result and the drop-in a fix suggests; `checks`: the checks;
`thresholds`: their editable values (typed, bounded, stored per box); `run`: the audit of a box's
engines over their latest snapshots."""
