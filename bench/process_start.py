"""What a SparkOps process costs to start with and without the project's bytecode cache.

Every process SparkOps starts is a new Python that imports the project: each CLI command, the
web server, Celery workers, the simulator's supervisor and engines, and its systemctl and
journalctl stand-ins (the tests start thousands of these). pip compiles an installed wheel's
modules when it installs them, but an editable install (`make install`) has no bytecode until a
process writes it, and a machine with PYTHONDONTWRITEBYTECODE=1 set (many CI and container
images) never writes it: every start compiles each imported module from source again. `make up`
and `make test` therefore compile the project's modules first (`compileall`).

This copies dashboard/ and sparkops/ twice into a temporary directory, compiles one copy, and
prints the CPU (user + system) per start of each process below, run from each copy with
PYTHONDONTWRITEBYTECODE=1, median of N starts, and the ratio.

    .venv/bin/python bench/process_start.py [--runs 15]"""

import argparse
import compileall
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROCESSES = {
    "sparkops --help (every CLI command's imports)": ["-m", "sparkops.cli", "--help"],
    "sim-systemctl show (the simulator's systemctl)": [
        "-m",
        "simulator.bin.systemctl",
        "show",
        "vllm-demo.service",
    ],
    "the web server's ASGI application": [
        "-c",
        "import os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'sparkops.settings');"
        " from sparkops.asgi import application",
    ],
    "the web server's URLconf (as at its first request)": [
        "-c",
        "import os, django; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'sparkops.settings');"
        " django.setup(); from django.urls import get_resolver; get_resolver().url_patterns",
    ],
    "a Celery worker's app and tasks": [
        "-c",
        "import os, django; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'sparkops.settings');"
        " django.setup(); from sparkops.celery import app; app.loader.import_default_modules()",
    ],
}


def cpu_of(argv, cwd, env):
    """CPU seconds (user + system) that one run of ARGV took, from the children's rusage."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr.decode()[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sparkops-start-") as tmp:
        copies = {}
        for name in ("source only", "compiled"):
            copy = Path(tmp) / name.replace(" ", "-")
            for package in ("dashboard", "sparkops"):
                shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
            copies[name] = copy
        if not compileall.compile_dir(copies["compiled"], quiet=1, workers=0):
            raise SystemExit("compileall failed")
        state = Path(tmp) / "sim-state"
        state.mkdir()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONPYCACHEPREFIX")}
        env.update(
            PYTHONDONTWRITEBYTECODE="1", SPARKOPS_SIM_STATE_DIR=str(state), SPARKOPS_VAR_DIR=str(Path(tmp) / "var")
        )
        print(f"CPU per start, median of {args.runs} ({os.cpu_count()} cores, PYTHONDONTWRITEBYTECODE=1)")
        print(f"{'process':52} {'source only':>12} {'compiled':>12} {'ratio':>7}")
        for label, argv in PROCESSES.items():
            medians = {}
            for name, copy in copies.items():
                run_env = {**env, "PYTHONPATH": str(copy)}
                cpu_of([sys.executable, *argv], copy, run_env)  # warm the page cache and the stdlib's bytecode
                medians[name] = statistics.median(
                    cpu_of([sys.executable, *argv], copy, run_env) for _ in range(args.runs)
                )
            ratio = medians["compiled"] / medians["source only"]
            print(
                f"{label:52} {medians['source only'] * 1000:10.0f} ms {medians['compiled'] * 1000:10.0f} ms {ratio:7.2f}"
            )


if __name__ == "__main__":
    main()
