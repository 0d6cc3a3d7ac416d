"""Controls: programs that refuse, not pages that warn (the fixes that held in docs/field-notes.md §5, §7, §8).

- `readiness`: when an engine serves, each kind by its own readiness, against a wall-clock budget
  and its main process (the gate of `sparkops wait-ready` and of `sparkops launch`);
- `waitready`: `sparkops wait-ready`, the readiness gate for a unit's `ExecStartPost=`;
- `launch`: `sparkops launch -- ENGINE ARGV…`, the guarded launch path (compile caps, one cold
  start at a time per box, a memory preflight, the launch recorded), with its steps in
  `launchplan` (the argv read into a plan, the compile caps), `startlock` (the box's start lock,
  the wait for its units' starts) and `memory_preflight` (the shares against the headroom);
- `gates`: the gates' outcomes, read from the journal, onto the start they belong to;
- `unitfix`: `sparkops unit fix ENGINE`, the launch audit's fixes as drop-ins (one per check, shown
  as a diff, written beside the unit, reloaded, observed into the change log);
- `unitfix_tasks`: the same from the audit page, applied by the box's own worker."""
