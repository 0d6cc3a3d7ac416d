"""The fleet's connection budget (issue 48 item 4), with the shipped deploy/pgbouncer/pgbouncer.ini
run by Debian's pgbouncer in front of the real PostgreSQL: many more clients than PostgreSQL
connections, and SparkOps' own queries through it with SPARKOPS_DB_PGBOUNCER=1."""

import configparser
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from django.db import connection

from sparkops.ports import free_port
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
INI = ROOT / "deploy" / "pgbouncer" / "pgbouncer.ini"

pytestmark = [
    pytest.mark.skipif(shutil.which("pgbouncer") is None, reason="pgbouncer is not installed (Debian: pgbouncer)"),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PgBouncer stands in front of PostgreSQL"),
]


@pytest.fixture
def bouncer(django_db_setup):
    """The shipped ini's pooling settings, verbatim, pointed at the test database on a free port
    (trust auth as the test server has; the shipped file's password file is the operator's)."""
    db = connection.settings_dict
    # Under /tmp, not pytest's tmp_path: as root pgbouncer runs as postgres, who must reach it.
    tmp_path = Path(tempfile.mkdtemp(prefix="sparkops-pgbouncer-"))
    shipped = configparser.ConfigParser(interpolation=None, comment_prefixes=(";", "#"))
    shipped.read_string(INI.read_text())
    settings = dict(shipped["pgbouncer"])
    port = free_port()
    settings.update(
        listen_addr="127.0.0.1",
        listen_port=str(port),
        unix_socket_dir="",
        auth_type="trust",
        auth_file=str(tmp_path / "users.txt"),
        logfile=str(tmp_path / "pgbouncer.log"),
        pidfile="",
    )
    (tmp_path / "users.txt").write_text(f'"{db["USER"] or "postgres"}" ""\n')
    name = db["NAME"]
    lines = ["[databases]", f"{name} = host={db['HOST'] or '127.0.0.1'} port={db['PORT'] or 5432} dbname={name}"]
    lines += ["[pgbouncer]", *(f"{k} = {v}" for k, v in settings.items())]
    (tmp_path / "pgbouncer.ini").write_text("\n".join(lines) + "\n")
    argv = ["pgbouncer", "-q", str(tmp_path / "pgbouncer.ini")]
    if os.geteuid() == 0:  # it refuses to run as root
        argv[1:1] = ["-u", "postgres"]
        shutil.chown(tmp_path, "postgres")
        for f in tmp_path.iterdir():
            shutil.chown(f, "postgres")
    proc = subprocess.Popen(argv)
    url = f"postgres://{db['USER'] or 'postgres'}@127.0.0.1:{port}/{name}"
    try:
        assert wait_for(lambda: listening(port), timeout=10), (tmp_path / "pgbouncer.log").read_text()
        yield url, int(settings["default_pool_size"]) + int(settings["reserve_pool_size"])
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp_path, ignore_errors=True)


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def server_connections(name) -> int:
    import psycopg

    db = connection.settings_dict
    url = f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/postgres"
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'", [name]
        ).fetchone()
        return row[0] if row else 0


@pytest.mark.django_db(transaction=True)
def test_a_hundred_busy_clients_cost_postgresql_no_more_than_the_pool(bouncer):
    """50 boxes' workers, two connections each, all in a transaction at once: PostgreSQL sees
    PgBouncer's pool (20 + 5 in reserve), the rest wait their turn and all succeed."""
    import psycopg

    url, pool = bouncer
    before = server_connections(connection.settings_dict["NAME"])
    clients = [psycopg.connect(url, autocommit=True) for _ in range(100)]
    peak, done, errors = [0], [], []
    gate = threading.Barrier(len(clients))

    def store(conn):
        try:
            gate.wait(10)
            with conn.transaction():
                conn.execute("SELECT pg_sleep(0.3)")
            done.append(1)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=store, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak[0] = max(peak[0], server_connections(connection.settings_dict["NAME"]) - before)
    for c in clients:
        c.close()
    assert not errors and len(done) == 100
    assert 0 < peak[0] <= pool


@pytest.mark.django_db(transaction=True)
def test_sparkops_reads_and_writes_through_it(bouncer):
    """A SparkOps process as the deployment runs it (SPARKOPS_DB_PGBOUNCER=1, its pool): rows
    written in a transaction, then read back with QuerySet.iterator() outside one."""
    url, _ = bouncer
    script = """
import django
django.setup()
from django.db import transaction
from dashboard.models import Host
with transaction.atomic():
    for i in range(3):
        Host.objects.create(name=f"pgb-{i}")
print(sorted(h.name for h in Host.objects.filter(name__startswith="pgb-").iterator(chunk_size=1)))
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "sparkops.settings",
            "DATABASE_URL": url,
            "SPARKOPS_DB_PGBOUNCER": "1",
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "['pgb-0', 'pgb-1', 'pgb-2']"
