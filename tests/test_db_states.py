"""Every page says why (issue 46, item 3): with the database down, full, read-only, out of pooled
connections or too slow, a page answers a 503 page naming that state, the API a 503 JSON with
it, and /healthz JSON with the same keys in every state, saying "cannot be written" when the
database cannot be written. On real databases, through a real web server (uvicorn):

- PostgreSQL: a server of the test's own (tests/privatepg.py), stopped with `pg_ctl stop -m
  fast`, switched to read-only (default_transaction_read_only), given a statement_timeout
  while a table is locked, its pool held by requests waiting on a lock, and (as root) its data
  directory on a small tmpfs filled to the last byte.
- SQLite: its file on a tmpfs remounted read-only, and that tmpfs filled.

Each server's users, session and API token are made by the product's own code in a `manage.py
shell` against that database."""

import json
import os
import shutil
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest
from django.conf import settings

from sparkops import webproc
from tests.privatepg import PrivatePostgres, reachable_dir
from tests.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("db_states")]  # one worker starts the servers
ROOT = Path(__file__).resolve().parents[1]
KEYS = {"status", "message", "database", "redis", "latest_poll", "problems"}
POOL_TIMEOUT_S = 8.0
IS_ROOT = os.geteuid() == 0

PEOPLE = """
import json
from django.contrib.auth import get_user_model
from django.test import Client
from dashboard.roles import set_role
from dashboard.tokens.models import ApiToken
user = get_user_model().objects.create_user("vera", password="vera-password-123")
set_role(user, "viewer")
cookies = []
for _ in range(4):
    client = Client()
    client.force_login(user)
    cookies.append(client.cookies["sessionid"].value)
tokens = [ApiToken.issue(user, name=f"check {i}")[1] for i in range(6)]
print(json.dumps({"cookies": cookies, "tokens": tokens}))
"""


class Box:
    """A database of the test's own with SparkOps' schema and a web server on it."""

    def __init__(self, root: Path, url: str) -> None:
        self.root, self.url = root, url
        self.env = {
            **os.environ,
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "sparkops.settings",
            "SECRET_KEY": settings.SECRET_KEY,
            "SPARKOPS_VAR_DIR": str(root / "var"),
            "SPARKOPS_DB_POOL_MAX": "2",
            "SPARKOPS_DB_POOL_TIMEOUT_S": str(POOL_TIMEOUT_S),
        }
        self.env.pop("SPARKOPS_TEST_DB_NAME", None)
        self.proc = None
        self.base = ""

    def prepare(self) -> None:
        manage = [sys.executable, "manage.py"]
        subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=self.env, check=True, capture_output=True)
        out = subprocess.run(
            [*manage, "shell", "-c", PEOPLE], cwd=ROOT, env=self.env, check=True, capture_output=True, text=True
        )
        people = json.loads(out.stdout.strip().splitlines()[-1])
        self.cookies, self.tokens = people["cookies"], people["tokens"]

    def start(self) -> None:
        self.proc, self.base = webproc.start_web(env=self.env, log_path=self.root / "web.log", timeout=60)

    def stop(self) -> None:
        webproc.stop_web(self.proc)

    def get(self, path: str, *, cookie: str = "", token: str = "", timeout: float = 60) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        cookies = {"sessionid": cookie} if cookie else {}
        with httpx.Client(base_url=self.base, timeout=timeout, cookies=cookies, headers=headers) as client:
            return client.get(path)

    def login(self) -> httpx.Response:
        """The login form posted (a write: the session), with its CSRF token."""
        with httpx.Client(base_url=self.base, timeout=60) as client:
            client.get("/login/")
            form = {"username": "vera", "password": "vera-password-123"}
            return client.post("/login/", data={**form, "csrfmiddlewaretoken": client.cookies.get("csrftoken", "")})

    def healthz(self) -> dict:
        response = self.get("/healthz")
        assert response.headers["content-type"] == "application/json", response.text[:500]
        body = response.json()
        assert set(body) == KEYS, body
        assert (response.status_code == 200) == (body["status"] == "ok"), (response.status_code, body)
        return body


def _says(response: httpx.Response, state: str) -> str:
    """The 503 page's text, asserted to name STATE (the page) or carry it (the API's JSON)."""
    assert response.status_code == 503, (response.status_code, response.text[:800])
    assert response.headers["retry-after"] == "30"
    if response.headers["content-type"].startswith("application/json"):
        body = response.json()
        assert body["database"] == state and body["error"] == "database unavailable", body
        return body["reason"]
    assert response.headers["content-type"].startswith("text/html"), response.headers
    assert f'<body data-database="{state}">' in response.text, response.text
    return response.text


@contextmanager
def _small_fs(size: str):
    """A file system of the test's own to fill (root: a tmpfs of SIZE; else a plain directory),
    which the `postgres` user can enter."""
    path = reachable_dir("sparkops-dbfs-")
    if IS_ROOT:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        if IS_ROOT:
            subprocess.run(["umount", "-l", str(path)], check=False)
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def tmpfs():
    with _small_fs("96m") as path:
        yield path


def _fill(path: Path) -> Path:
    """Write a file under PATH until its file system has no byte left."""
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 20, 4096, 512):
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


# PostgreSQL ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg_box(tmpfs):
    if not shutil.which("pg_ctl") and not Path("/usr/lib/postgresql").exists():
        pytest.skip("PostgreSQL's server tools are not installed")
    pg = PrivatePostgres(tmpfs / "pg").init()
    pg.start()
    pg.create_database()
    box = Box(tmpfs / "pg", pg.url)
    box.pg = pg
    try:
        box.prepare()
        box.start()
        yield box
    finally:
        box.stop()
        pg.close()


def _admin(box):
    dsn = f"host=127.0.0.1 port={box.pg.port} user=postgres dbname={box.pg.dbname}"
    return psycopg.connect(dsn, autocommit=True, options="-c default_transaction_read_only=off")


def _database_set(box, setting: str) -> None:
    """ALTER DATABASE … SETTING (or RESET), then end the web server's sessions: its pool opens
    new ones, which read the setting (CONN_HEALTH_CHECKS: a dead connection is never handed out)."""
    with _admin(box) as conn:
        conn.execute(f"ALTER DATABASE {box.pg.dbname} {setting}")
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [box.pg.dbname],
        )


def test_pg_answers_ok_before_any_fault(pg_box):
    body = pg_box.healthz()
    assert body["database"] == "ok", body


def test_pg_read_only(pg_box):
    _database_set(pg_box, "SET default_transaction_read_only = on")
    try:
        body = pg_box.healthz()
        assert body["database"] == "read_only" and body["status"] == "unhealthy", body
        assert body["message"].startswith("The database cannot be written: it is read-only."), body
        assert "cannot be written" in body["problems"][0], body
        assert pg_box.get("/engines/", cookie=pg_box.cookies[0]).status_code == 200  # reads go on
        page = _says(pg_box.login(), "read_only")
        assert "The database is read-only" in page and "read-only transaction" in page
        assert "read-only" in _says(pg_box.get("/api/engines/", token=pg_box.tokens[0]), "read_only")
    finally:
        _database_set(pg_box, "RESET default_transaction_read_only")
    assert pg_box.healthz()["database"] == "ok"


def test_pg_slow_query(pg_box):
    _database_set(pg_box, "SET statement_timeout = '300ms'")
    try:
        with _admin(pg_box) as holder, holder.transaction():
            holder.execute("LOCK TABLE django_session, dashboard_collectorstate IN ACCESS EXCLUSIVE MODE")
            body = pg_box.healthz()
            assert body["database"] == "slow" and body["message"].startswith("The database is too slow:"), body
            assert "statement timeout" in body["message"], body
            page = _says(pg_box.get("/engines/", cookie=pg_box.cookies[0]), "slow")
            assert "The database did not answer in time" in page and "statement timeout" in page
    finally:
        _database_set(pg_box, "RESET statement_timeout")
    assert pg_box.healthz()["database"] == "ok"


def test_pg_pool_exhausted(pg_box):
    """Both pooled connections wait on a lock (two page requests); the next request waits
    SPARKOPS_DB_POOL_TIMEOUT_S for one and says the pool is spent, not that the database is down."""
    answers = []
    with _admin(pg_box) as holder:
        with holder.transaction():
            holder.execute("LOCK TABLE django_session IN ACCESS EXCLUSIVE MODE")
            waiting = [
                threading.Thread(target=lambda c=c: answers.append(pg_box.get("/engines/", cookie=c).status_code))
                for c in pg_box.cookies[:2]
            ]
            for thread in waiting:
                thread.start()
            sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'"
            assert wait_for(lambda: holder.execute(sql, [pg_box.pg.dbname]).fetchone()[0] == 2, timeout=30)
            body = pg_box.healthz()
            api = pg_box.get("/api/engines/", token=pg_box.tokens[1])
        for thread in waiting:
            thread.join(30)
    assert body["database"] == "pool_exhausted", body
    assert body["message"].startswith("Every database connection is in use:"), body
    assert "SPARKOPS_DB_POOL_MAX=2" in body["message"], body
    assert "no database connection free" in _says(api, "pool_exhausted")
    assert answers == [200, 200]  # the waiting pages answered once the lock went
    assert pg_box.healthz()["database"] == "ok"


def test_pg_down(pg_box):
    """Stopped: the first page waits the pool's timeout and says "down", not "no connection
    free"; the pages after it are answered at once while it stays down (a client timeout below
    the pool's would fail otherwise); /healthz knows it without the pool."""
    pg_box.pg.stop()
    try:
        page = _says(pg_box.get("/engines/", cookie=pg_box.cookies[1]), "down")
        assert "<h1>The database is down</h1>" in page and "no database connection free" not in page
        assert "refused" in page.lower(), page
        known = POOL_TIMEOUT_S - 2
        _says(pg_box.get("/engines/", cookie=pg_box.cookies[2], timeout=known), "down")
        api = _says(pg_box.get("/api/engines/", token=pg_box.tokens[2], timeout=known), "down")
        assert api.startswith("the database cannot be reached: it is down"), api
        body = pg_box.healthz()
        assert body["database"] == "down" and body["status"] == "unhealthy", body
        assert body["message"].startswith("The database is down:") and "refused" in body["message"].lower(), body
        assert body["latest_poll"] is None and body["redis"] == "ok", body
    finally:
        pg_box.pg.start()
    assert wait_for(lambda: pg_box.healthz()["database"] == "ok", timeout=30)
    assert pg_box.get("/engines/", cookie=pg_box.cookies[1]).status_code == 200  # and the pages with it


@pytest.mark.skipif(not IS_ROOT, reason="filling a disk needs a tmpfs of its own (root)")
def test_pg_disk_full(pg_box, tmpfs):
    """The data directory's file system filled: writes that need a new block fail ("could not
    extend file"); /healthz says the database cannot be written (its check needs a new block:
    an upsert of one row fit its page and said "ok")."""
    filler = _fill(tmpfs)
    try:
        body = pg_box.healthz()
        assert body["database"] == "full" and body["status"] == "unhealthy", body
        assert body["message"].startswith("The database cannot be written: its disk is full."), body
        assert "No space left on device" in body["message"], body
        assert pg_box.get("/engines/", cookie=pg_box.cookies[2]).status_code == 200  # reads go on
    finally:
        filler.unlink()
    assert pg_box.healthz()["database"] == "ok"


# SQLite ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sqlite_fs():
    with _small_fs("24m") as path:
        yield path


@pytest.fixture(scope="module")
def sqlite_box(sqlite_fs, tmp_path_factory):
    box = Box(tmp_path_factory.mktemp("sqlitebox"), f"sqlite:///{sqlite_fs / 'sparkops.sqlite3'}")
    box.prepare()
    box.start()
    yield box
    box.stop()


@pytest.mark.skipif(not IS_ROOT, reason="a full disk needs a tmpfs of its own (root)")
def test_sqlite_disk_full(sqlite_box, sqlite_fs):
    assert sqlite_box.healthz()["database"] == "ok"
    filler = _fill(sqlite_fs)
    try:
        body = sqlite_box.healthz()
        assert body["database"] == "full", body
        assert body["message"].startswith("The database cannot be written: its disk is full."), body
        # SQLite cannot grow its -shm file either: a page's reads fail too, and say why.
        page = _says(sqlite_box.get("/engines/", cookie=sqlite_box.cookies[0]), "full")
        assert "<h1>The database's disk is full</h1>" in page and "KiB free on the file system" in page, page
    finally:
        filler.unlink()
    assert sqlite_box.healthz()["database"] == "ok"


def test_sqlite_read_only_file(sqlite_box, sqlite_fs):
    """Root ignores file modes: the file system is remounted read-only (with the server stopped:
    a file open for writing keeps it busy); others drop write permission on the file and its
    directory."""
    assert sqlite_box.healthz()["database"] == "ok"
    _writable(sqlite_box, sqlite_fs, False)
    try:
        body = sqlite_box.healthz()
        assert body["database"] == "read_only", body
        assert body["message"].startswith("The database cannot be written: it is read-only."), body
        assert "The database is read-only" in _says(sqlite_box.login(), "read_only")
        _says(sqlite_box.get("/api/engines/", token=sqlite_box.tokens[3]), "read_only")
    finally:
        _writable(sqlite_box, sqlite_fs, True)
    assert sqlite_box.healthz()["database"] == "ok"


def _writable(box: Box, fs: Path, writable: bool) -> None:
    if not IS_ROOT:
        for p in (fs, *fs.iterdir()):
            p.chmod(p.stat().st_mode | 0o200 if writable else p.stat().st_mode & ~0o222)
        return
    box.stop()
    subprocess.run(["mount", "-o", "remount," + ("rw" if writable else "ro"), str(fs)], check=True)
    box.start()
