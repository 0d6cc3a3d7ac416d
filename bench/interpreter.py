"""How much CPU the same Python work costs under each interpreter `make` could build the venv from.

`make install` makes `.venv` from the distribution's interpreter (`/usr/bin/python3`) when it is
3.11 or newer and can make a virtual environment, else from `python3` on PATH (the Makefile says
why). Debian and Ubuntu build their CPython with profile-guided optimisation and link-time
optimisation; pyenv and a plain `./configure && make` build it without either unless asked
(`PYTHON_CONFIGURE_OPTS="--enable-optimizations --with-lto"`). Measured against pyenv's 3.11.7 on a
2-core box: the crawl's URL test (Django rendering) 18.5 → 17.1 CPU-s; the whole suite's wall time
moved within its run-to-run noise (411-433 s against 415-417 s), its CPU going to the tests beside.

This runs the same stdlib-only work under each interpreter given (default: /usr/bin/python3 and
every other python3 on PATH), N times each, and prints the median CPU (user + system) of each part
and its ratio to the first interpreter's:
- start: `python -S -c pass`, twenty times (a process start, as the simulator's systemctl is; -S
  here and below: without `site`, what each interpreter's own site-packages holds does not count);
- imports: a new process importing what a SparkOps child imports from the stdlib (asyncio, email,
  http, json, logging, sqlite3), ten times;
- work: one process doing dict, string, class, json and regular-expression work for about 0.3 s.

    .venv/bin/python bench/interpreter.py [--runs 5] [PYTHON ...]"""

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys

IMPORTS = "import asyncio, email.parser, http.client, json, logging, sqlite3, urllib.request"
WORK = r"""
import json, re, time
t = time.process_time()
d = {}
for i in range(1_000_000):
    d[i % 1000] = d.get(i % 1000, 0) + i
s = "".join(str(i) for i in range(200_000))
class Row:
    def __init__(self, x): self.x = x
    def value(self): return self.x + 1
total = sum(Row(i).value() for i in range(500_000))
doc = json.dumps([{"name": f"engine-{i}", "up": i % 2 == 0, "tps": i * 1.5} for i in range(20_000)])
rows = json.loads(doc)
pattern = re.compile(r"^vllm:(\w+)\{model_name=\"([^\"]+)\"\} ([0-9.e+-]+)$")
lines = [f'vllm:num_requests_running{{model_name="m{i}"}} {i}.0' for i in range(50_000)]
matched = sum(1 for line in lines if pattern.match(line))
print(time.process_time() - t)
"""


def children_cpu(argv, times):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(times):
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(python, runs):
    parts = {"start (20 processes)": [], "imports (10 processes)": [], "work (1 process)": []}
    for _ in range(runs):
        parts["start (20 processes)"].append(children_cpu([python, "-S", "-c", "pass"], 20))
        parts["imports (10 processes)"].append(children_cpu([python, "-S", "-c", IMPORTS], 10))
        parts["work (1 process)"].append(children_cpu([python, "-S", "-c", WORK], 1))
    return {name: statistics.median(values) for name, values in parts.items()}


def candidates():
    found = []
    for path in [
        "/usr/bin/python3",
        *(os.path.join(d, "python3") for d in os.environ.get("PATH", "").split(os.pathsep)),
    ]:
        real = os.path.realpath(path)
        if os.access(path, os.X_OK) and real not in {os.path.realpath(p) for p in found}:
            found.append(path)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "pythons", nargs="*", help="interpreters to compare (default: /usr/bin/python3, python3 on PATH)"
    )
    args = parser.parse_args()
    pythons = [shutil.which(p) or p for p in args.pythons] or candidates()
    results = {}
    for python in pythons:
        version = subprocess.run(
            [python, "-c", "import sys, sysconfig; print(sys.version.split()[0], sysconfig.get_config_var('prefix'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        results[python] = measure(python, args.runs)
        print(f"{python} ({version})")
        for name, cpu in results[python].items():
            first = results[pythons[0]][name]
            print(f"  {name:24s} {cpu * 1000:8.0f} ms CPU   x{cpu / first:.2f} of {pythons[0]}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
