"""Controls: programs that refuse, not pages that warn (the fixes that held in docs/field-notes.md §5, §7, §8).

- `launch`: `sparkops launch -- ENGINE ARGV…`, the guarded launch path (compile caps, one cold
  start at a time per box, a memory preflight, the launch recorded), with its steps in
  `launchplan` (the argv read into a plan, the compile caps), `startlock` (the box's start lock,
  the wait for its units' starts) and `memory_preflight` (the shares against the headroom);
- `unitfix`: `sparkops unit fix ENGINE`, the launch audit's fixes as drop-ins (one per check, shown
  as a diff, written beside the unit, reloaded, observed into the change log);
- `unitfix_tasks`: the same from the audit page, applied by the box's own worker."""
