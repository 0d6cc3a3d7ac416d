"""How each engine was launched: observed, versioned, measured and shown.

`observer` decides when to observe and runs an observation; `handrun` finds engines no unit runs;
`starts` measures every start and the restart budget, with `gate_journal` reading each start's
readiness-gate outcome from its unit's journal; `account` reads the engine's own account;
`snapshot` builds, redacts, hashes and stores the configuration snapshot; `drift` checks it
against the change log and the account; `changelog` writes its difference as an observed entry;
`page` is what the launch configuration page shows."""
