"""The suite's `xdist_group` marks keep a group's tests on one worker (tests/xdist_env.py's hook):
a small project of its own, run with that plugin under three workers and `--dist loadgroup`."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROJECT = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("n", range(6))
def test_one_of_six(n):
    out = os.environ["WORKERS_OUT"]
    with open(out, "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""

LOOSE = """
import os
import pytest


@pytest.mark.parametrize("n", range(6))
def test_loose(n):
    with open(os.environ["LOOSE_OUT"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""


def test_a_group_runs_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(PROJECT)
    (tmp_path / "test_loose.py").write_text(LOOSE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    grouped, loose = tmp_path / "grouped.txt", tmp_path / "loose.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    env.update(PYTHONPATH=str(ROOT), WORKERS_OUT=str(grouped), LOOSE_OUT=str(loose))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:django",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.xdist_env",
            "-n",
            "3",
            "--dist",
            "loadgroup",
            str(tmp_path),
        ],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "12 passed" in proc.stdout
    workers = grouped.read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers
    assert len(loose.read_text().split()) == 6
