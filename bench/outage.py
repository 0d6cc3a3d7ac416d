"""The database away under a running stack: is a death paged, with its true start, and is any reading lost? (issue 46)

`sparkops up` (web, worker, beat) watches one simulated vLLM engine; a webhook receiver on
127.0.0.1 records each POST's arrival.

- PostgreSQL: a private PostgreSQL 15 cluster (initdb in a temp dir, its own port, stopped with
  `pg_ctl stop -m fast` and started again) is the stack's database. For each outage length
  (default 20 s, 120 s, 300 s) the server is stopped, the engine dies 5 s later (exit 0, as vLLM
  after an EngineCore death: the worker pages at once, nothing will restart it), and the server
  is started again when the outage is over. Printed per outage: death → webhook, the alert's
  started_at minus the death, the widest gap in the engine's stored series around the outage
  (SPARKOPS_FLUSH_INTERVAL is 10 s), and the pages per death (1 = exactly once).
- SQLite on a full disk: the database file on a 64 MB tmpfs (needs root to mount) is filled to
  the last byte after a WAL checkpoint, so the next write fails with "database or disk is full";
  the engine dies, and the space is given back 30 s later. Printed: death → webhook while full,
  started_at error, pages, the widest gap.
- PostgreSQL on a full disk: the private cluster's data directory on a 256 MB tmpfs, filled to its
  last byte while the stack runs; the engine dies, the space is given back 30 s later. Printed as
  for SQLite.

    sudo .venv/bin/python bench/outage.py [--outages 20,120,300] [--skip-pg] [--skip-pg-full] [--skip-sqlite]

The engine is started again between deaths (and its alert resolved). Uses REDIS_URL if set, else
`sparkops up` starts a private Redis."""

import argparse
import contextlib
import itertools
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _alerts_stack import ROOT, Receiver, Stack

PG_BIN = Path("/usr/lib/postgresql/15/bin")
DEATH_AFTER_S = 5.0


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, timeout, step=0.02):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


class PrivatePostgres:
    """A PostgreSQL cluster of the bench's own (trust auth on 127.0.0.1), run as `postgres` when root."""

    def __init__(self, root=None):
        self.dir = Path(tempfile.mkdtemp(prefix="sparkops-pg-", dir=root))
        self.port = free_port()
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(self.dir, "postgres")
        self._pg("initdb", "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres", "--no-sync")
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/sparkops"

    def _pg(self, tool, *args):
        subprocess.run([*self.as_user, str(PG_BIN / tool), *args], check=True, stdout=subprocess.DEVNULL)

    def start(self):
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c max_connections=200"
        self._pg("pg_ctl", "-D", str(self.dir / "data"), "-l", str(self.dir / "log"), "-o", opts, "-w", "start")

    def stop(self):
        self._pg("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")

    def create_db(self):
        self._pg("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "sparkops")

    def query(self, sql, *params):
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def close(self):
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def pg_up_times(pg):
    """When the engine's 'up' series was sampled, as stored in PG's database (epoch seconds)."""
    return [
        ts.timestamp()
        for (ts,) in pg.query(
            "SELECT s.ts FROM dashboard_sample s JOIN dashboard_series r ON r.id = s.series_id "
            "WHERE r.engine_id IS NOT NULL AND r.metric = 'up'"
        )
    ]


def firing(receiver):
    return [h for h in receiver.delivered() if h["body"].get("transition") == "firing"]


def resolved(receiver):
    return [h for h in receiver.delivered() if h["body"].get("transition") == "resolved"]


def engine_up_again(stack, receiver, deaths):
    stack.control(f"/_sim/units/{stack.engine['name']}/start")
    stack.wait_healthy(timeout=60)
    wait_for(lambda: len(resolved(receiver)) >= deaths, 60)


def widest_gap(times, start, end):
    times = sorted(t for t in times if start <= t <= end)
    gaps = [(b - a) for a, b in itertools.pairwise(times)]
    return max(gaps) if gaps else float("nan"), len(times)


def kill_engine(stack):
    died = time.time()
    stack.control(f"/_sim/units/{stack.engine['name']}/fault", {"kind": "exit0"})
    return died


def start_up(stack, *extra):
    """`sparkops up` as Stack.start_up runs it, with EXTRA arguments. The PostgreSQL outages run
    with --no-beat unless --beat: django_celery_beat once exited 170 s into a 300 s outage (its
    scheduler gives up on database errors) and `sparkops up` then stopped the whole stack; `up`
    now starts beat again, and --beat measures the stack as shipped."""
    log = open(stack.dir / "up.log", "w")  # noqa: SIM115 (the child's log: open while it runs)
    stack.procs.append(
        subprocess.Popen(
            [sys.executable, "manage.py", "up", "--port", str(stack.web_port), *extra],
            cwd=ROOT,
            env=stack.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    )


def start_stack(database_url=None):
    if database_url:
        os.environ["BENCH_DATABASE_URL"] = database_url
    else:
        os.environ.pop("BENCH_DATABASE_URL", None)
    stack = Stack(engine_spec="vllm:bench-vllm", web_port=free_port())
    # A runtime directory of its own: /run/sparkops belongs to whichever install claimed it first.
    stack.env["SPARKOPS_RUNTIME_DIR"] = str(stack.dir / "run")
    receiver = Receiver()
    stack.start_simulator()
    return stack, receiver


def pg_outages(lengths, *, beat=False):
    pg = PrivatePostgres()
    stack = None
    try:
        pg.start()
        pg.create_db()
        stack, receiver = start_stack(pg.url)
        stack.register(receiver.url)
        start_up(stack, *(() if beat else ("--no-beat",)))
        stack.wait_healthy()
        time.sleep(15)  # the worker polls a while: its rules, channels and states are read
        rows = []
        for n, length in enumerate(lengths, start=1):
            before = len(firing(receiver))
            last_id = pg.query("SELECT coalesce(max(id), 0) FROM alerts_alertevent")[0][0]
            stopped = time.time()
            pg.stop()
            time.sleep(DEATH_AFTER_S)
            died = kill_engine(stack)
            paged = wait_for(lambda before=before: len(firing(receiver)) > before, length - DEATH_AFTER_S - 0.5)
            page_s = firing(receiver)[before]["at"] - died if paged else float("nan")
            time.sleep(max(0.0, stopped + length - time.time()))
            pg.start()
            back = time.time()
            this_death = "SELECT started_at FROM alerts_alertevent WHERE rule = 'engine_down' AND id > %s"
            got = wait_for(lambda q=this_death, i=last_id: bool(pg.query(q, i)), 60, step=0.2)
            row = pg.query(this_death, last_id)
            started_err = row[0][0].timestamp() - died if got and row else float("nan")
            time.sleep(15)  # the first stores after the outage, and anything late and duplicated
            times = pg_up_times(pg)
            gap, count = widest_gap(times, stopped - 10, back + 10)
            pages = len(firing(receiver)) - before
            print(
                f"PostgreSQL down {length:.0f} s, death at +{DEATH_AFTER_S:.0f} s: death → webhook "
                f"{page_s:.2f} s; started_at − death {started_err:+.2f} s; widest gap in the engine's "
                f"'up' series {gap:.1f} s ({count} samples from 10 s before to 10 s after); pages {pages}",
                flush=True,
            )
            rows.append((length, page_s, started_err, gap, pages))
            engine_up_again(stack, receiver, n)
            time.sleep(5)
        return rows
    finally:
        if stack is not None:
            stack.stop()
            print(f"(logs: {stack.dir}/up.log)", flush=True)
        pg.close()


def fill(mount):
    """Fill the file system at MOUNT to its last byte (as root: past any reserve); the files to remove."""
    files = [mount / "filler", mount / "filler-tail"]
    for path, chunk in zip(files, (1 << 20, 4096)):
        with contextlib.suppress(OSError), open(path, "wb", buffering=0) as out:
            while True:
                out.write(b"\0" * chunk)
    return files


def death_while_full(label, stack, receiver, full_for, fill_disk, started, up_times):
    """The disk under LABEL's database filled (FILL_DISK: the files to remove), the engine killed
    inside, the space given back after FULL_FOR s; printed: death → webhook while full, the alert's
    started_at (STARTED(): epoch s or None) minus the death, the widest gap in UP_TIMES(), pages."""
    before = len(firing(receiver))
    files = fill_disk()
    full = time.time()
    time.sleep(DEATH_AFTER_S)
    died = kill_engine(stack)
    paged = wait_for(lambda: len(firing(receiver)) > before, full_for)
    page_s = firing(receiver)[before]["at"] - died if paged else float("nan")
    time.sleep(max(0.0, full + full_for - time.time()))
    for path in files:
        path.unlink(missing_ok=True)
    back = time.time()
    got = wait_for(lambda: started() is not None, 60, step=0.5)
    started_err = started() - died if got else float("nan")
    time.sleep(15)  # the first stores after the space returned, and anything late and duplicated
    gap, count = widest_gap(up_times(), full - 10, back + 10)
    pages = len(firing(receiver)) - before
    print(
        f"{label} disk full {full_for:.0f} s, death at +{DEATH_AFTER_S:.0f} s: death → webhook {page_s:.2f} s "
        f"while full; started_at − death {started_err:+.2f} s; widest gap in the engine's 'up' series "
        f"{gap:.1f} s ({count} samples); pages {pages}",
        flush=True,
    )


def pg_disk_full(full_for=30.0):
    """A private PostgreSQL whose data directory is on a 256 MB tmpfs, filled while the stack runs:
    a death inside it is paged from the worker's spool, and recorded once space returns."""
    mount = Path(tempfile.mkdtemp(prefix="sparkops-pgfull-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m,mode=0777", "tmpfs", str(mount)], check=True)
    pg, stack = PrivatePostgres(root=mount), None
    try:
        pg.start()
        pg.create_db()
        stack, receiver = start_stack(pg.url)
        stack.register(receiver.url)
        start_up(stack, "--no-beat")
        stack.wait_healthy()
        time.sleep(15)
        last_id = pg.query("SELECT coalesce(max(id), 0) FROM alerts_alertevent")[0][0]
        this_death = "SELECT started_at FROM alerts_alertevent WHERE rule = 'engine_down' AND id > %s"

        def started():
            rows = pg.query(this_death, last_id)
            return rows[0][0].timestamp() if rows else None

        death_while_full("PostgreSQL", stack, receiver, full_for, lambda: fill(mount), started, lambda: pg_up_times(pg))
    finally:
        if stack is not None:
            stack.stop()
            print(f"(logs: {stack.dir}/up.log)", flush=True)
        pg.close()
        subprocess.run(["umount", "-l", str(mount)], check=False)


def sqlite_disk_full(full_for=30.0):
    mount = Path(tempfile.mkdtemp(prefix="sparkops-full-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], check=True)
    stack = None
    db = mount / "sparkops.sqlite3"
    try:
        stack, receiver = start_stack(f"sqlite:///{db}")
        stack.env["DATABASE_URL"] = f"sqlite:///{db}"
        stack.register(receiver.url)
        stack.start_up()
        stack.wait_healthy()
        time.sleep(15)
        conn = sqlite3.connect(db, timeout=20)
        for _ in range(50):  # the WAL emptied, so the next write must grow a file
            busy, _log, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                break
            time.sleep(0.1)
        conn.close()

        def rows(sql):
            with contextlib.closing(sqlite3.connect(db, timeout=20)) as c:
                return [datetime.fromisoformat(ts).replace(tzinfo=UTC).timestamp() for (ts,) in c.execute(sql)]

        def started():
            found = rows("SELECT started_at FROM alerts_alertevent WHERE rule='engine_down' AND state <> 'pending'")
            return found[0] if found else None

        up_times = (
            "SELECT s.ts FROM dashboard_sample s JOIN dashboard_series r ON r.id = s.series_id "
            "WHERE r.engine_id IS NOT NULL AND r.metric = 'up'"
        )
        death_while_full("SQLite", stack, receiver, full_for, lambda: fill(mount), started, lambda: rows(up_times))
    finally:
        if stack is not None:
            stack.stop()
            print(f"(logs: {stack.dir}/up.log)", flush=True)
        subprocess.run(["umount", "-l", str(mount)], check=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outages", default="20,120,300", help="PostgreSQL outage lengths, seconds")
    parser.add_argument("--beat", action="store_true", help="run beat through the PostgreSQL outages (as shipped)")
    parser.add_argument("--skip-pg", action="store_true")
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument("--skip-pg-full", action="store_true")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    if not args.skip_pg:
        pg_outages([float(x) for x in args.outages.split(",")], beat=args.beat)
    if not args.skip_pg_full:
        pg_disk_full()
    if not args.skip_sqlite:
        sqlite_disk_full()


if __name__ == "__main__":
    main()
