"""The fleet at 10, 25 or 50 boxes on one machine (issue 48): each box a network namespace with a
real `sparkops worker --host boxNN` and 3 simulated vLLM engines on its own address, one
PostgreSQL and one Redis reached over the links (tests/fleet/netns.py). Printed, with the load
average: each engine's tick spacing (p50/p99, target p99 ≤ 2.5 s at a 2 s interval), PostgreSQL
connections at peak (target ≤ 80 of 100) and per box, Redis connections, samples/s written,
PostgreSQL's CPU, worker PSS per box, an engine death on the last box → its webhook; with
--partition the last box cut for 60 s (pages while cut, engine pages for it, duplicates after
the restore), with --kill-leader the leader's worker killed (upkeep gap, runs twice). Each
box's bytes/s to the centre (PostgreSQL, Redis and webhooks: both ways on its link) and Redis's
own client count (INFO clients, the whole server) are printed too.

With --pgbouncer the boxes reach PostgreSQL through a PgBouncer in transaction mode (Debian's
`pgbouncer`, started here as the postgres user, at most --pgbouncer-pool server connections),
as docs/install.md's fleet deployment does; without it they connect directly.

    sudo DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/fleet_scale.py \\
        --boxes 10 [--seconds 60] [--pool-max 3] [--pgbouncer] [--partition] [--kill-leader]

It makes a database of its own, `sparkops_fleet_scale`, anew on that server at each run."""

import argparse
import contextlib
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")
DBNAME = "sparkops_fleet_scale"
ENGINES = 3


def database_fresh(url: str) -> str:
    """DBNAME made anew on URL's server; the URL that names it."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DBNAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DBNAME}")
    return url.rsplit("/", 1)[0] + f"/{DBNAME}"


def pg_cpu_s() -> float:
    """CPU seconds spent so far by every process named postgres on this machine."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            text = stat.read_text()
            name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
            if name.startswith("postgres"):
                total += int(rest[11]) + int(rest[12])
    return total / tick


def pss_kib(pid: int) -> int:
    """PSS of PID and every process of its session (the worker and what it started)."""
    total = 0
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if os.getsid(int(proc.name)) != pid:
                continue
            for line in (proc / "smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
    return total


def connections(cursor) -> dict[str, int]:
    cursor.execute(
        "SELECT coalesce(application_name, ''), count(*) FROM pg_stat_activity WHERE datname = %s GROUP BY 1",
        [DBNAME],
    )
    return dict(cursor.fetchall())


def spacing(since, until) -> list[float]:
    """Every gap between an engine's consecutive samples of one metric in [SINCE, UNTIL]."""
    from dashboard.models import Sample, Series

    gaps: list[float] = []
    first = {}
    for s in Series.objects.filter(engine__isnull=False).order_by("pk"):
        first.setdefault(s.engine_id, s.pk)
    for pk in first.values():
        ts = list(
            Sample.objects.filter(series_id=pk, ts__gte=since, ts__lte=until)
            .order_by("ts")
            .values_list("ts", flat=True)
        )
        gaps += [(b - a).total_seconds() for a, b in itertools.pairwise(ts)]
    return gaps


def forwarded(pid: int) -> int:
    """How many connections the socat forwarder PID carries now (one child each)."""
    count = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            text = stat.read_text()
            count += int(text[text.rindex(")") + 2 :].split()[1]) == pid
    return count


def link_bytes(net) -> dict[str, int]:
    """Bytes both ways on each box's link so far (its veth's counters on the centre's side)."""
    done = subprocess.run(["ip", "-n", net.ns, "-j", "-s", "link", "show"], check=True, capture_output=True, text=True)
    links = {link["ifname"]: link["stats64"] for link in json.loads(done.stdout)}
    return {
        box.name: links[box.outer]["rx"]["bytes"] + links[box.outer]["tx"]["bytes"]
        for box in net.boxes
        if box.outer in links
    }


def redis_clients(url: str) -> int:
    import redis

    return int(redis.Redis.from_url(url).info("clients")["connected_clients"])


@contextlib.contextmanager
def pgbouncer(database: dict, work: Path, pool: int):
    """A PgBouncer in transaction mode in front of DATABASE's server, for its database only; the
    settings dict the boxes use to reach it. Auth is the server's (trust on loopback here)."""
    if shutil.which("pgbouncer") is None:
        sys.exit("--pgbouncer needs pgbouncer (Debian: apt-get install pgbouncer)")
    port = 6433
    (work / "users.txt").write_text(f'"{database.get("USER") or "postgres"}" ""\n')
    (work / "pgbouncer.ini").write_text(
        f"""[databases]
{DBNAME} = host={database.get("HOST") or "127.0.0.1"} port={database.get("PORT") or 5432} dbname={DBNAME}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {work}/users.txt
pool_mode = transaction
default_pool_size = {pool}
max_client_conn = 2000
ignore_startup_parameters = extra_float_digits,options
logfile = {work}/pgbouncer.log
pidfile =
"""
    )
    shutil.chown(work, "postgres")  # pgbouncer refuses to run as root: it runs as postgres
    for name in ("users.txt", "pgbouncer.ini"):
        shutil.chown(work / name, "postgres")
    proc = subprocess.Popen(["pgbouncer", "-q", "-u", "postgres", str(work / "pgbouncer.ini")], start_new_session=True)
    try:
        import psycopg

        for attempt in range(50):
            try:
                psycopg.connect(f"postgres://{database.get('USER') or 'postgres'}@127.0.0.1:{port}/{DBNAME}").close()
                break
            except psycopg.OperationalError:
                if attempt == 49 or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        yield {**database, "HOST": "127.0.0.1", "PORT": port}
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--boxes", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--pool-max", type=int, default=0, help="the workers' SPARKOPS_WORKER_DB_POOL_MAX (0: its default, 2)"
    )
    parser.add_argument("--pgbouncer", action="store_true", help="the boxes through PgBouncer (transaction mode)")
    parser.add_argument("--pgbouncer-pool", type=int, default=20, help="PgBouncer's default_pool_size")
    parser.add_argument("--partition", action="store_true")
    parser.add_argument("--kill-leader", action="store_true")
    args = parser.parse_args()
    url = database_fresh(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"))
    os.environ["DATABASE_URL"] = url
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from dashboard.models import Engine, Host, Sample
    from tests.fleet.netns import FleetNet, why_not

    reason = why_not()
    if reason:
        sys.exit(reason)
    call_command("migrate", verbosity=0)
    prefix = f"fleetscale{os.getpid()}"
    env = {"SPARKOPS_WORKER_DB_POOL_MAX": str(args.pool_max)} if args.pool_max else {}
    work = Path(tempfile.mkdtemp(prefix="sparkops-fleet-"))
    out: dict = {"boxes": args.boxes, "engines": args.boxes * ENGINES, "pool_max": args.pool_max or "default"}
    database = dict(connection.settings_dict)
    bouncer = contextlib.nullcontext(database)
    if args.pgbouncer:
        env["SPARKOPS_DB_PGBOUNCER"] = "1"
        out["pgbouncer_pool"] = args.pgbouncer_pool
        bouncer = pgbouncer(database, Path(tempfile.mkdtemp(prefix="sparkops-pgbouncer-")), args.pgbouncer_pool)
    redis_before = redis_clients(settings.CELERY_BROKER_URL)
    with (
        bouncer as database,
        FleetNet(
            args.boxes,
            database=database,
            redis_url=settings.CELERY_BROKER_URL,
            prefix=prefix,
            work=work,
            env=env,
        ) as net,
    ):
        assert net.receiver is not None
        net.register(ENGINES)
        t0 = time.monotonic()
        for box in net.boxes:
            box.start_worker()
        startup_peak = [0]

        def all_up() -> bool:
            with connection.cursor() as cursor:  # the start's connections count too
                startup_peak[0] = max(startup_peak[0], sum(connections(cursor).values()))
            return (
                not Engine.objects.exclude(status="up").exists()
                and not Host.objects.filter(last_report_at=None).exists()
            )

        net.wait(
            all_up,
            120 + 5 * args.boxes,
            "every engine up",
            step=1.0,
        )
        out["all_up_after_s"] = round(time.monotonic() - t0, 1)
        time.sleep(20)  # past the first minute's reads (launch observation) into the steady state
        since, cpu0, samples0 = timezone.now(), pg_cpu_s(), Sample.objects.count()
        bytes0 = link_bytes(net)
        peak, per_box_peak, redis_peak = 0, 0, 0
        with connection.cursor() as cursor:
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                by_app = connections(cursor)
                peak = max(peak, sum(by_app.values()))
                per_box_peak = max([per_box_peak, *(n for app, n in by_app.items() if app.startswith("sparkops-box"))])
                redis_peak = max(redis_peak, redis_clients(settings.CELERY_BROKER_URL))
                time.sleep(1.0)
            steady = connections(cursor)
        until = timezone.now()
        elapsed = (until - since).total_seconds()
        per_box_bytes = [(n - bytes0[name]) / elapsed for name, n in link_bytes(net).items()]
        gaps = spacing(since, until)
        # Each connection a box opens through a forwarder is one socat child of it.
        pg_fwd, redis_fwd = (forwarded(proc.pid) for proc in net.forwarders[0:3:2])  # the machine-side ones
        out.update(
            {
                "tick_spacing_p50_s": round(pct(gaps, 0.5), 2),
                "tick_spacing_p99_s": round(pct(gaps, 0.99), 2),
                "tick_spacing_max_s": round(max(gaps), 2) if gaps else None,
                "pg_connections_peak": peak,
                "pg_connections_peak_at_start": startup_peak[0],
                "pg_connections_per_box_peak": per_box_peak,
                "pg_connections_steady_per_box": round(
                    statistics.mean([n for app, n in steady.items() if app.startswith("sparkops-box")] or [0]), 1
                ),
                "pg_connections_from_boxes": pg_fwd,
                "redis_connections_from_boxes": redis_fwd,
                "redis_connected_clients_peak": redis_peak,
                "redis_connected_clients_before": redis_before,
                "bytes_per_s_per_box_mean": round(statistics.mean(per_box_bytes)),
                "bytes_per_s_per_box_max": round(max(per_box_bytes)),
                "samples_per_s": round((Sample.objects.count() - samples0) / elapsed, 1),
                "postgres_cpu_cores": round((pg_cpu_s() - cpu0) / elapsed, 3),
                "worker_pss_mib_per_box": round(
                    statistics.mean(pss_kib(b.worker.pid) for b in net.boxes if b.worker) / 1024, 1
                ),
            }
        )
        victim = net.boxes[-1]
        out.update(death_of_own_process(net, victim))
        killed = time.time()
        victim.post(victim.urls[0] + "/_sim/fault", {"kind": "crash"})
        page = net.wait(
            lambda: [
                p
                for p in net.receiver.pages()
                if p.get("engine") == f"{victim.name}-e0" and p.get("transition") == "firing"
            ],
            60,
            "the death's page",
        )
        # The box's other engines share one process outside the worker's PID namespace: the probe's path.
        out["death_to_webhook_probe_s"] = round(page[0]["_received_at"] - killed, 2)
        if args.partition:
            out.update(partition(net, net.boxes[-2]))
        if args.kill_leader:
            out.update(kill_leader(net, prefix, settings.CELERY_BROKER_URL))
        out["loadavg"] = os.getloadavg()
    print(json.dumps(out, indent=1))


def death_of_own_process(net, box) -> dict:
    """An engine that is its own process beside BOX's worker (as every engine is on a real box)
    dies: its crash → the webhook, through the worker's pidfd on its port's owner."""
    from dashboard.models import Engine, Host
    from tests.fleet.netns import ENGINE_PORT

    name, port = f"{box.name}-solo", ENGINE_PORT + 50
    proc = box.start_engine_beside_worker(name, port)
    engine = Engine.objects.create(
        name=name, kind="vllm", url=f"http://{box.address}:{port}", host=Host.objects.get(name=box.name)
    )
    net.wait(lambda: Engine.objects.get(pk=engine.pk).status == "up", 120, "the solo engine up")
    time.sleep(12)  # two metrics ticks and the port owner's look (at most every 10 s): its pidfd is armed
    killed = time.time()
    box.post(engine.url + "/_sim/fault", {"kind": "crash"})
    page = net.wait(
        lambda: [p for p in net.receiver.pages() if p.get("engine") == name and p.get("transition") == "firing"],
        60,
        "the solo engine's page",
    )
    proc.wait(30)
    return {"death_to_webhook_s": round(page[0]["_received_at"] - killed, 2), "death_cause": page[0].get("cause")}


def partition(net, box) -> dict:
    """BOX cut for 60 s, then restored; its pages counted."""
    from dashboard.models import Engine

    before = len(net.receiver.pages())
    box.cut()
    time.sleep(60)
    during = net.receiver.pages()[before:]
    unknown = Engine.objects.filter(host__name=box.name, status="unknown").count()
    box.restore()
    net.wait(
        lambda: set(Engine.objects.filter(host__name=box.name).values_list("status", flat=True)) == {"up"},
        90,
        "back up",
    )
    time.sleep(20)
    after = net.receiver.pages()[before:]
    fired = [(p["rule"], p["subject"], p["started_at"]) for p in after if p.get("transition") == "firing"]
    return {
        "cut_pages_firing": [p["subject"] for p in during if p.get("transition") == "firing"],
        "cut_engine_pages": sum(1 for p in after if p.get("rule") == "engine_down" and p.get("host") == box.name),
        "cut_engines_unknown_at_60s": unknown,
        "cut_duplicates_after_restore": len(fired) - len(set(fired)),
    }


def kill_leader(net, prefix, redis_url) -> dict:
    import redis

    client, key = redis.Redis.from_url(redis_url), f"{prefix}:fleet:upkeep:runs"

    def checks():
        rows = [r.decode().split() for r in client.lrange(key, 0, -1)]
        return sorted((float(at), host) for at, host, duty in rows if duty == "alerts-check-stale")

    net.boxes[0].kill_worker()
    killed = time.time()
    net.wait(lambda: [c for c in checks() if c[0] > killed], 90, "upkeep elsewhere")
    time.sleep(12)
    runs = checks()
    before = max(at for at, _ in runs if at <= killed)
    after = min(at for at, _ in runs if at > killed)
    # Two runners at once: consecutive checks by different boxes within half an interval.
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(runs) if a[1] != b[1]]
    return {
        "leader_upkeep_gap_s": round(after - before, 1),
        "upkeep_resumed_on": sorted({h for at, h in runs if at > killed}),
        "upkeep_handovers_within_half_interval": sum(1 for g in gaps if g < 2.5),
    }


if __name__ == "__main__":
    main()
