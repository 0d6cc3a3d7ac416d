"""50 people logging in at once (issue 46, item 4): how many get in, and how long each waited.

A web server (uvicorn, the product's settings: PBKDF2 at Django's million rounds, the pool at
SPARKOPS_DB_POOL_MAX) on a migrated database with N users who have never logged in; N clients
each fetch /login/ and post the form at the same moment. Printed: logins in (302 to the
overview) of N, the other answers by status, p50/p99/max of the post's latency, and on
PostgreSQL the most connections the web process held at once.

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/sparkops_bench \\
        .venv/bin/python bench/login_burst.py [--clients 50] [--pool-max 10] [--pool-timeout 10]

SQLite under a temp dir unless BENCH_DATABASE_URL names a PostgreSQL database (created if
missing, migrated). The users' password hashes are written at the product's iteration count,
as a first login after `sparkops user add` finds them.

Before (ModelBackend hashing with its pooled connection checked out), the issue's run: 11 of 50
first logins answered 503 after waiting 10 s for a connection. Figures for this version: the
commit that adds this file and docs/performance."""

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PY = sys.executable
PASSWORD = "burst-password-123"
TOKEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')

USERS_SCRIPT = """
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from dashboard.roles import set_role
encoded = make_password({password!r})  # one hash at the product's rounds, the same for each user
User = get_user_model()
for i in range({n}):
    user, _ = User.objects.get_or_create(username=f"burst-{{i}}")
    user.password, user.last_login = encoded, None
    user.save()
    set_role(user, "viewer")
"""

BEFORE_SETTINGS = """from sparkops.settings import *  # noqa: F403
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
"""


async def login(base: str, username: str, password: str) -> tuple[int, float]:
    """(status of the login post, its seconds): 302 is in. A client of its own (cookies)."""
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        page = await client.get("/login/")
        found = TOKEN.search(page.text)
        token = found.group(1) if found else client.cookies.get("csrftoken", "")
        started = time.perf_counter()
        answer = await client.post(
            "/login/", data={"username": username, "password": password, "csrfmiddlewaretoken": token}
        )
        return answer.status_code, time.perf_counter() - started


async def burst(base: str, usernames: list[str], password: str) -> list[tuple[int, float]]:
    """Every user's login at once (each fetches the form first, then all post together)."""
    return list(await asyncio.gather(*(login(base, name, password) for name in usernames)))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def ensure_database(url: str) -> None:
    import psycopg

    parts = urlparse(url)
    admin = parts._replace(path="/postgres").geturl().replace("postgres://", "postgresql://", 1)
    with psycopg.connect(admin, autocommit=True) as conn:
        name = parts.path.lstrip("/")
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def peak_connections(url: str, app_name: str, stop: threading.Event, peak: list[int]) -> None:
    import psycopg

    with psycopg.connect(url.replace("postgres://", "postgresql://", 1), autocommit=True) as conn:
        while not stop.is_set():
            sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            peak[0] = max(peak[0], conn.execute(sql, [app_name]).fetchone()[0])
            time.sleep(0.02)


def main() -> None:
    from sparkops import webproc

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--pool-max", type=int, default=10)
    parser.add_argument("--pool-timeout", type=float, default=10.0)
    parser.add_argument(
        "--django-backend",
        action="store_true",
        help="log in through Django's own ModelBackend (the hash with the connection held): the before",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparkops-login-burst-"))
    url = os.environ.get("BENCH_DATABASE_URL") or f"sqlite:///{work / 'bench.sqlite3'}"
    postgres = url.startswith(("postgres://", "postgresql://"))
    if postgres:
        ensure_database(url)
    app_name = f"sparkops-login-burst-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "sparkops.settings",
        "SECRET_KEY": "login-burst-bench-" + uuid.uuid4().hex,
        "SPARKOPS_VAR_DIR": str(work / "var"),
        "SPARKOPS_DB_POOL_MAX": str(args.pool_max),
        "SPARKOPS_DB_POOL_TIMEOUT_S": str(args.pool_timeout),
        "SPARKOPS_LOGIN_FAILURE_LIMIT": "1000",
        "PGAPPNAME": app_name,
    }
    env.pop("SPARKOPS_TEST_DB_NAME", None)
    if args.django_backend:
        (work / "before_settings.py").write_text(BEFORE_SETTINGS)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(work), env.get("PYTHONPATH", "")]))
        env["DJANGO_SETTINGS_MODULE"] = "before_settings"
    subprocess.run([PY, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    script = USERS_SCRIPT.format(password=PASSWORD, n=args.clients)
    subprocess.run([PY, "manage.py", "shell", "-c", script], cwd=ROOT, env=env, check=True)
    proc, base = webproc.start_web(env=env, log_path=work / "web.log", timeout=60)
    peak, stop = [0], threading.Event()
    watcher = threading.Thread(target=peak_connections, args=(url, app_name, stop, peak), daemon=True)
    if postgres:
        watcher.start()
    try:
        results = asyncio.run(burst(base, [f"burst-{i}" for i in range(args.clients)], PASSWORD))
    finally:
        stop.set()
        webproc.stop_web(proc)
    seconds = [s for _, s in results]
    others: dict[int, int] = {}
    for status, _ in results:
        if status != 302:
            others[status] = others.get(status, 0) + 1
    vendor = "PostgreSQL" if postgres else "SQLite"
    backend = "Django's ModelBackend" if args.django_backend else "PoolFriendlyModelBackend"
    print(f"{vendor}, {backend}, pool max {args.pool_max}, pool timeout {args.pool_timeout:g} s, {os.cpu_count()} CPUs")
    print(f"logins in: {len(results) - sum(others.values())}/{len(results)}" + (f"; others {others}" if others else ""))
    print(
        f"login post latency: p50 {percentile(seconds, 0.5):.2f} s, p99 {percentile(seconds, 0.99):.2f} s, "
        f"max {max(seconds):.2f} s"
    )
    if postgres:
        print(f"most connections the web process held at once: {peak[0]} (bound {args.pool_max})")


if __name__ == "__main__":
    main()
