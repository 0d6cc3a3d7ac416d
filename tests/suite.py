"""`make test`: the suite in two runs. First everything but the network-namespace tests, in
pytest-xdist workers; then those (the `netns` marker, tests/fleet), alone: building a veth link in
the root namespace makes a Chromium of another worker abort its loads with ERR_NETWORK_CHANGED,
so they must not overlap the browser tests. Arguments that choose by marker (`-m`) make it one run,
as asked. A run that selects nothing (exit 5: e.g. a PYTEST_ARGS
naming one file) is not a failure unless both select nothing.

    python -m tests.suite WORKERS [pytest arguments...]"""

import subprocess
import sys

NO_TESTS = 5


def main(argv: list[str]) -> int:
    workers, args = argv[0], argv[1:]
    if "-m" in args or any(a.startswith("-m") and len(a) > 2 and not a.startswith("--") for a in args):
        # The caller chose the tests by marker: one run, as asked.
        return subprocess.call([sys.executable, "-m", "pytest", "-n", workers, "--dist", "loadgroup", *args])
    runs = [
        [sys.executable, "-m", "pytest", "-n", workers, "--dist", "loadgroup", "-m", "not netns", *args],
        [sys.executable, "-m", "pytest", "-m", "netns", *args],
    ]
    codes = []
    for run in runs:
        codes.append(subprocess.call(run))
        if codes[-1] not in (0, NO_TESTS):
            return codes[-1]
    return NO_TESTS if all(code == NO_TESTS for code in codes) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
