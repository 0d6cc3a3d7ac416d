"""`sparkops-wait-ready PORT BUDGET_S`: the simulated units' readiness helper (their ExecStartPost),
with the exit semantics of docs/field-notes.md §7:

- the engine answers `/health` (or `/v1/models`) with 200: exit 0;
- `$MAINPID` (the unit's main process, which systemd passes to ExecStartPost) is gone: exit 1 at once;
- `--warmup S`: after the first answer, S seconds more (a helper's warm-up request) before exit 0, so
  the engine answers while its unit is still activating;
- BUDGET_S of wall clock passed with the process alive: exit 1 (with `--exit-0-on-timeout`: exit 0,
  as the first helper of docs/field-notes.md §7 did, so systemd calls a unit that never served "active"). The
  budget counts the clock, not sleeps: a request that stalls is bounded by what is left of it.

The supervisor runs it as a real process while the unit sits in activating/start-post, and kills it
at TimeoutStartSec as systemd does. Standard library only: it starts in a few tens of milliseconds."""

from __future__ import annotations

import os
import sys
import time
import urllib.error
import urllib.request

POLL_S = 0.05


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def answers(port: int, timeout: float) -> bool:
    for path in ("/health", "/v1/models"):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=max(timeout, 0.01)) as resp:
                if resp.status == 200:
                    return True
        except (urllib.error.URLError, OSError, ValueError):
            continue
    return False


def main(argv: list[str]) -> int:
    try:
        port, budget = int(argv[0]), float(argv[1])
        rest, lie, warmup = list(argv[2:]), False, 0.0
        while rest:
            word = rest.pop(0)
            if word == "--exit-0-on-timeout":
                lie = True
            elif word == "--warmup":
                warmup = float(rest.pop(0))
                if not 0 <= warmup < 3600:
                    raise ValueError(warmup)
            else:
                raise ValueError(word)
    except (IndexError, ValueError):
        print("usage: sparkops-wait-ready PORT BUDGET_S [--exit-0-on-timeout] [--warmup S]", file=sys.stderr)
        return 2
    main_pid = int(os.environ.get("MAINPID") or 0)
    deadline = time.monotonic() + budget
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            print(f"port {port} not ready after {budget:g} s", file=sys.stderr)
            return 0 if lie else 1
        if main_pid and not alive(main_pid):
            print(f"main process {main_pid} is gone", file=sys.stderr)
            return 1
        if answers(port, min(1.0, left)):
            time.sleep(warmup)  # a warm-up request after the first answer: the unit stays activating
            return 0
        time.sleep(min(POLL_S, max(deadline - time.monotonic(), 0)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
