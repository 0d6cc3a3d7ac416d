"""Deployment files: the systemd units pass `systemd-analyze verify` and carry what the README
promises; docker-compose runs as a non-root user, waits for a one-shot migrate, keeps its state
in a volume, writes no password, gives the worker the host's systemd and journal, checks the web
process' liveness with a proper Host header and beat by its liveness file, and rotates logs."""

import configparser
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
UNITS = ROOT / "deploy" / "systemd"
SERVICES = ("sparkops-web", "sparkops-worker", "sparkops-beat")


def unit(name):
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read_string((UNITS / name).read_text())
    return parser


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_units_pass_systemd_analyze_verify():
    out = subprocess.run(
        [str(ROOT / ".ci" / "systemd-verify")], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "5 units verified" in out.stdout


def test_units_run_as_a_dedicated_user_restart_bounded_and_keep_state():
    target = unit("sparkops.target")
    assert set(target["Unit"]["Wants"].split()) >= {f"{s}.service" for s in SERVICES}
    for name in SERVICES:
        u = unit(f"{name}.service")
        service = u["Service"]
        assert service["User"] == "sparkops" and service["EnvironmentFile"] == "/etc/sparkops/sparkops.env"
        assert service["StateDirectory"] == "sparkops" and service["Restart"] == "always"
        assert int(u["Unit"]["StartLimitBurst"]) > 1 and int(u["Unit"]["StartLimitIntervalSec"]) > 0
        assert "sparkops-migrate.service" in u["Unit"]["Requires"] and u["Unit"]["PartOf"] == "sparkops.target"
        assert service["NoNewPrivileges"] == "yes" and service["ProtectSystem"] == "strict"
        assert u["Install"]["WantedBy"] == "sparkops.target"
    worker = unit("sparkops-worker.service")["Service"]
    assert worker["SupplementaryGroups"] == "systemd-journal"
    # What the worker must still read: every process in /proc, the cgroup tree, the GPU.
    assert "ProtectProc" not in worker and "ProcSubset" not in worker and "PrivateDevices" not in worker
    assert (UNITS / "sparkops.sysusers.conf").read_text().count("u sparkops") == 1


def compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_is_non_root_waits_for_migrate_and_keeps_its_state():
    services = compose()["services"]
    for name in ("migrate", "web", "worker", "beat"):
        s = services[name]
        assert s["user"] and not s["user"].startswith(("0", "root")), name
        assert "state:/var/lib/sparkops" in s["volumes"], name
        assert s["environment"]["SPARKOPS_VAR_DIR"] == "/var/lib/sparkops"
        assert s["logging"]["options"]["max-size"], name
    assert services["migrate"]["command"] == "sparkops migrate --noinput" and services["migrate"]["restart"] == "no"
    for name in ("web", "worker", "beat"):
        assert services[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
        assert "migrate" not in services[name]["command"]
    for name in ("redis", "postgres"):
        assert services[name]["logging"]["options"]["max-file"]
    assert "state" in compose()["volumes"]


def test_compose_writes_no_password():
    text = (ROOT / "docker-compose.yml").read_text()
    services = compose()["services"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    assert "${POSTGRES_PASSWORD" in services["web"]["environment"]["DATABASE_URL"]
    assert not re.search(r"postgres://\w+:(?!\$\{)[^@]+@", text)
    assert not re.search(r"(PASSWORD|SECRET_KEY)\s*[:=]\s*(?!\$\{)\w", text)


def test_compose_worker_reads_the_hosts_systemd_and_journal_and_healthchecks():
    services = compose()["services"]
    mounts = {v.split(":")[1] for v in services["worker"]["volumes"]}
    assert {
        "/run/systemd",
        "/run/dbus/system_bus_socket",
        "/var/log/journal",
        "/etc/machine-id",
        "/host/proc",
        "/sys/fs/cgroup",
    } <= mounts
    assert services["worker"]["pid"] == "host" and services["worker"]["group_add"]
    web_check = " ".join(services["web"]["healthcheck"]["test"])
    assert "/livez" in web_check and "'Host'" in web_check and "ALLOWED_HOSTS" in web_check
    assert "/healthz" not in web_check
    assert "beat.alive" in " ".join(services["beat"]["healthcheck"]["test"])
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert (
        re.search(r"^USER sparkops$", dockerfile, re.M)
        and "install -y -q --no-install-recommends systemd" in dockerfile
    )
    assert "pip install --no-cache-dir ." in dockerfile and "-e ." not in dockerfile


@pytest.mark.django_db
def test_livez_answers_without_login_and_wants_an_allowed_host(client, settings):
    response = client.get("/livez")
    assert response.status_code == 200 and response.content == b"ok\n"
    settings.ALLOWED_HOSTS = ["ops.example.org"]
    assert client.get("/livez", headers={"Host": "ops.example.org"}).status_code == 200
    assert client.get("/livez", headers={"Host": "127.0.0.1:8000"}).status_code == 400  # why the check sends one


@pytest.mark.django_db(transaction=True)  # the scheduler closes its connection between ticks
def test_beat_touches_its_liveness_file_while_it_ticks(settings, tmp_path):
    from dashboard import beat
    from sparkops.celery import app

    settings.SPARKOPS_VAR_DIR = settings.VAR_DIR = tmp_path
    scheduler = beat.SparkOpsScheduler(app=app)
    scheduler.tick()
    first = (tmp_path / "beat.alive").stat().st_mtime
    assert time.time() - first < 5
    scheduler._next_alive -= beat.ALIVE_EVERY_S
    time.sleep(0.05)
    scheduler.tick()
    assert (tmp_path / "beat.alive").stat().st_mtime > first


def test_the_deployment_reaches_postgresql_through_pgbouncer_in_transaction_mode():
    """Issue 48 item 4: 50 boxes' workers against one PostgreSQL of 100 connections. Measured
    (bench/fleet_scale.py, docs/performance.md#fleet-scale), PgBouncer's 20 server connections
    serve them with workers keeping a pool of 2; a worker's direct pool of 1 fitted too, but
    starved its tasks. Every service goes through it, with the settings that go with it."""
    services = compose()["services"]
    for name in ("migrate", "web", "worker", "beat"):
        env = services[name]["environment"]
        assert "@pgbouncer:6432/" in env["DATABASE_URL"] and env["SPARKOPS_DB_PGBOUNCER"] == "1", name
        assert services[name]["depends_on"]["pgbouncer"] == {"condition": "service_healthy"}, name
    assert services["worker"]["environment"]["SPARKOPS_WORKER_DB_POOL_MAX"] == "2"
    bouncer = services["pgbouncer"]
    assert (
        bouncer["build"] == "deploy/pgbouncer" and bouncer["depends_on"]["postgres"]["condition"] == "service_healthy"
    )
    assert bouncer["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    ini = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=None, comment_prefixes=(";", "#"))
    ini.read_string((ROOT / "deploy" / "pgbouncer" / "pgbouncer.ini").read_text())
    pgb = ini["pgbouncer"]
    assert pgb["pool_mode"] == "transaction" and pgb["listen_port"] == "6432"
    assert int(pgb["default_pool_size"]) + int(pgb["reserve_pool_size"]) <= 80  # of PostgreSQL's 100
    assert int(pgb["max_client_conn"]) >= 500 * 2  # 500 boxes' workers
    assert bouncer["ulimits"]["nofile"]["soft"] > int(pgb["max_client_conn"])
    dropin = configparser.ConfigParser(interpolation=None)
    dropin.optionxform = str
    dropin.read_string((UNITS / "pgbouncer.service.d" / "sparkops.conf").read_text())
    assert int(dropin["Service"]["LimitNOFILE"]) > int(pgb["max_client_conn"])
    env_file = dict(
        line.split("=", 1)
        for line in (UNITS / "sparkops.env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert ":6432/" in env_file["DATABASE_URL"] and env_file["SPARKOPS_DB_PGBOUNCER"] == "1"
    assert env_file["SPARKOPS_WORKER_DB_POOL_MAX"] == "2"
    for name in ("sparkops-migrate", *SERVICES):
        assert "pgbouncer.service" in unit(f"{name}.service")["Unit"]["After"].split(), name
    entrypoint = (ROOT / "deploy" / "pgbouncer" / "entrypoint.sh").read_text()
    assert "POSTGRES_PASSWORD" in entrypoint and "exec pgbouncer" in entrypoint
