"""Who asked systemd for a unit's job, where this process asked it: the Restart button's task runs
`systemctl restart` on the box's worker, the same process whose exit path then reads the job
systemd ran, so the page or resolution can say "systemctl restart by ada (the Restart button),
14:02:07" instead of a bare "systemctl restart". In memory, for KEEP_S: a job asked by anything
else (a shell, another process) is said without a name, since only systemd knows it."""

import threading
import time

KEEP_S = 300.0  # a request this old no longer names the job it asked for
SLACK_S = 5.0  # a job's time is systemd's journal's; the note is taken just before systemctl runs

_lock = threading.Lock()
_asked: dict[str, tuple[float, str]] = {}  # unit -> (wall s when asked, who and how)


def note(unit: str, who: str) -> None:
    """UNIT's next job was asked for by WHO (e.g. "ada (the Restart button)"), now."""
    with _lock:
        _asked[unit] = (time.time(), who)


def who(unit: str, at: float) -> str:
    """Who asked for UNIT's job logged at AT (wall s), '' when this process did not ask for it."""
    with _lock:
        asked = _asked.get(unit)
    if asked is None or not asked[0] - SLACK_S <= at <= asked[0] + KEEP_S:
        return ""
    return asked[1]
