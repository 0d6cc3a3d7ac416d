"""The readiness gate: when does an engine serve? `readiness` asks each kind by its own readiness
against a wall-clock budget and its main process; `waitready` is `sparkops wait-ready`, the gate
in a unit's `ExecStartPost=`, whose last line is its verdict (launch/gate_journal.py reads it
back onto the start). `sparkops launch` waits on the same gate.

A package of its own, below the audit, the launch records and the controls, which all need it
(the audit and the unit fix check a unit's budget against the gate's own start-up margin): it
reads the engine and the box through the HTTP client and the collectors only, and runs in a
fresh interpreter per start, where Django is never set up."""
