"""`python -m dashboard.controls.stopped --socket PATH UNIT`: the stop hook's module path as the
drop-ins `sparkops unit fix` wrote before the boxes of the data flow moved under `sparkops/`
(2026-12-07). A unit keeps that `ExecStopPost=` line until its next fix, and a hook that no longer
runs would leave its deaths to the slower paths without a word: so the old path runs the hook where
it now lives (sparkops/controls/stopped.py), and the audit's stop_hook check recognises both.
Nothing imports this module; `sparkops unit fix` writes `-m sparkops.controls.stopped`."""

import sys

from sparkops.controls.stopped import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
