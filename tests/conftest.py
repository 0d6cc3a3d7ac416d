"""Shared fixtures: named personas and a standard fleet (healthchecks' hc/test.py style).

Tests use the real PostgreSQL and Redis when DATABASE_URL / REDIS_URL point at them (CI
sets both); otherwise SQLite and the private Redis that `make test` starts."""

import functools
import inspect

import pytest
from django.conf import settings

from dashboard.roles import set_role
from tests.chromium import ARGS, executable


@pytest.fixture(scope="session", autouse=True)
def _close_the_main_threads_http_client():
    """Tests that tick a poller in the main thread leave its event loop and aiohttp session
    open; close them while the session's output is still captured."""
    yield
    from sparkops.collectors import runner

    runner.close()


@pytest.fixture(scope="session")
def django_db_setup(request, django_test_environment, django_db_blocker, django_db_modify_db_settings):
    """pytest-django's test database, but under pytest-xdist each worker's is cloned from one
    template that the first worker migrates (tests/testdb.py) instead of every worker migrating
    its own at once. Without xdist it is pytest-django's setup (this suite uses neither
    `--reuse-db` nor `--nomigrations`)."""
    from django.test.utils import setup_databases

    from tests import testdb

    verbosity = request.config.option.verbose
    workerinput = getattr(request.config, "workerinput", None)
    with django_db_blocker.unblock():
        if workerinput:
            db_cfg = testdb.setup_worker_database(workerinput["workerid"], workerinput["testrunuid"], verbosity)
        else:
            db_cfg = setup_databases(verbosity=verbosity, interactive=False, aliases={testdb.ALIAS})
    yield
    with django_db_blocker.unblock():
        testdb.teardown(db_cfg, verbosity)


@pytest.fixture(scope="session", autouse=True)
def _fast_password_hashing():
    """Passwords hashed at one PBKDF2 iteration in the test process (tests/hashers.py)."""
    from django.test import override_settings

    with override_settings(PASSWORD_HASHERS=["tests.hashers.OneIterationPBKDF2"]):
        yield


@pytest.fixture(scope="session", autouse=True)
def _empty_the_sqlite_test_database_past_its_triggers():
    """How a transactional test's database is emptied after it, on SQLite.

    Django empties the database after each transactional test (`flush`). On PostgreSQL that is
    TRUNCATE, which fires no row trigger; on SQLite it is DELETE FROM, which the change log's
    append-only triggers (sparkops/changelog/dbguard.py) rightly refuse for a locked entry —
    and a refused flush leaves every later test a dirty database. So on SQLite the flush takes
    the triggers out, deletes, and puts back exactly the SQL that was installed, in one
    transaction: the guarantee stays whole everywhere but in the emptying between tests."""
    from django.db import connection, transaction

    if connection.vendor != "sqlite":
        yield
        return
    DatabaseOperations = type(connection.ops)
    original = DatabaseOperations.execute_sql_flush

    def execute_sql_flush(self, sql_list):
        with transaction.atomic(using=self.connection.alias), self.connection.cursor() as cursor:
            cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
            triggers = cursor.fetchall()
            for name, _sql in triggers:
                cursor.execute(f'DROP TRIGGER "{name}"')
            original(self, sql_list)
            for _name, sql in triggers:
                cursor.execute(sql)

    DatabaseOperations.execute_sql_flush = execute_sql_flush
    yield
    DatabaseOperations.execute_sql_flush = original


KEPT_BY_FLUSH = ("django_content_type", "auth_permission")


@pytest.fixture(scope="session", autouse=True)
def _flush_keeps_what_migrate_made():
    """How a transactional test's database is emptied after it, on both databases.

    After each transactional test Django empties every table and then sends `post_migrate`,
    whose handlers write back every content type and permission the flush deleted: 0.87 s per
    test on PostgreSQL at load 5 (profiled: 24 s of a 30-test run in `create_permissions`). No
    test writes either table, so the flush leaves those two alone and `post_migrate` is not sent
    again (no SparkOps app listens to it).

    On PostgreSQL the flush is one `TRUNCATE` of every table, which gives each table and index
    a new file; the test tables hold a few rows, so `DELETE FROM` each is cheaper. `TRUNCATE`
    fires no row trigger and checks no foreign key; the deletes do the same, in their own
    transaction, in `session_replication_role = replica` (no user trigger, the change log's
    append-only ones included, and no foreign-key trigger fires). That needs a superuser, as the
    test database's owner is on the CI machine; any other role keeps Django's `TRUNCATE`. A flush
    that resets sequences keeps Django's SQL too."""
    from django.core.management.commands import flush
    from django.db import connection

    DatabaseOperations = type(connection.ops)
    original_sql_flush = DatabaseOperations.sql_flush
    original_emit = flush.emit_post_migrate_signal
    superuser = {}

    def is_superuser(ops):
        if "is" not in superuser:
            with ops.connection.cursor() as cursor:
                cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
                superuser["is"] = bool(cursor.fetchone()[0])
        return superuser["is"]

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        tables = [t for t in tables if t not in KEPT_BY_FLUSH]
        if self.connection.vendor != "postgresql" or reset_sequences or not tables or not is_superuser(self):
            return original_sql_flush(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return ["SET LOCAL session_replication_role = replica"] + [f"DELETE FROM {self.quote_name(t)}" for t in tables]

    DatabaseOperations.sql_flush = sql_flush
    flush.emit_post_migrate_signal = lambda *args, **kwargs: None
    yield
    DatabaseOperations.sql_flush = original_sql_flush
    flush.emit_post_migrate_signal = original_emit


@pytest.fixture(autouse=True)
def _each_test_starts_with_an_unmeasured_clock():
    """The process's measured clock offset (dashboard.clock, set by every stored report) is
    process state: a test that shifted this process's clock an hour and stored a report left
    every later test on its worker converting times an hour back (an alert's start an hour
    before the death it was seen at). Each test starts from a process that never measured."""
    yield
    from dashboard import clock

    clock._measured_offset_s = 0.0


@pytest.fixture(scope="session", autouse=True)
def _screenshots_when_asked_for():
    """Screenshots are written when asked for: `SPARKOPS_SCREENSHOTS=1 make test` (or
    `SPARKOPS_UPDATE_SCREENSHOT=1`, which also refreshes the README's picture) writes every
    browser test's pictures to artifacts/screenshots/ for a person to look at. Otherwise a
    screenshot with a `path` is not taken: nothing in a run reads those files, and a full-page
    picture cost 2-4 s of a core each at load 20 (a tall page at 390 px), over a hundred a run.
    A screenshot a test asks for as bytes (no `path`) is always taken."""
    import os

    if os.environ.get("SPARKOPS_SCREENSHOTS") or os.environ.get("SPARKOPS_UPDATE_SCREENSHOT"):
        yield
        return
    try:
        from playwright.sync_api import Page
    except ImportError:  # no browser tests here
        yield
        return
    original = Page.screenshot

    def screenshot(self, *args, **kwargs):
        if kwargs.get("path") is not None:
            return b""
        return original(self, *args, **kwargs)

    Page.screenshot = screenshot
    yield
    Page.screenshot = original


@pytest.fixture(scope="session")
def _shared_web_server(django_db_setup, django_db_blocker, tmp_path_factory):
    """One uvicorn serving the test database, for the test process (each xdist worker has its
    own), started the first time a test asks (`shared_web`) and stopped before the test database
    is dropped. A start cost 1.5-2 s of a core (Django's import), once per browser test before.
    The server keeps nothing between tests that the database, flushed after each, does not (no
    cache, sessions and lockouts in the database) but one thing: when its sockets last set the
    viewer-presence key (they skip setting it again for 10 s), which the live tests delete before
    each test; the live stack (tests/live/test_browser.py `stack`) sets it again. No view runs
    systemctl, so the live stack's pages come from this server too; a test that needs a server
    with an environment of its own starts one with sparkops.webproc (test_db_pool)."""
    from django.db import connection

    from tests.live.stack import start_web, stop

    with django_db_blocker.unblock():
        name = connection.settings_dict["NAME"]
    log = tmp_path_factory.mktemp("web") / "web.log"
    server = {}

    def get():
        if "proc" not in server or server["proc"].poll() is not None:
            server["proc"], server["base"] = start_web(db_name=name, log_path=log)
        return server["proc"], server["base"], log

    yield get
    stop(server.get("proc"))


@pytest.fixture
def shared_web(_shared_web_server, monkeypatch):
    """(proc, base URL, log path) of the test process's web server (started if not running)."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop in this thread
    return _shared_web_server()


@pytest.fixture
def asgi_server(shared_web, transactional_db):
    """The test process's uvicorn, used as pytest-django's `live_server` is (`.url`): the product's
    own ASGI server, where every page opens its WebSocket (Django's live server answers it 404)."""
    from types import SimpleNamespace

    return SimpleNamespace(url=shared_web[1])


@pytest.fixture(scope="module")
def chromium(request):
    """One headless Chromium (Debian's, tests/chromium.py: the headless shell, or the whole browser for
    a module that sets FULL_BROWSER) for a test module: launching one per test cost a second or
    two of a core each time. Playwright's sync API holds an event loop in this thread while it
    runs, so the module's database calls are allowed beside it (DJANGO_ALLOW_ASYNC_UNSAFE, as each
    browser test used to set)."""
    import os

    from playwright.sync_api import sync_playwright

    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=executable(getattr(request.module, "FULL_BROWSER", False)), args=ARGS
            )
            yield browser
            browser.close()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture(autouse=True)
def _close_the_tests_browser_pages(request):
    """Every page a test opened in the module's Chromium is closed after it: the browser outlives
    the test, and an open page keeps its WebSocket to the shared web server, whose presence key
    would keep the live pushes of a later test going (test_presence saw it never expire)."""
    yield
    if "chromium" in request.fixturenames:
        browser = request.getfixturevalue("chromium")
        for context in list(browser.contexts):
            context.close()


def _user(django_user_model, name, role):
    user = django_user_model.objects.create_user(username=name, password=f"{name}-password-123")
    set_role(user, role)
    return user


@pytest.fixture
def viewer(db, django_user_model):
    return _user(django_user_model, "vera", "viewer")


@pytest.fixture
def operator(db, django_user_model):
    return _user(django_user_model, "otto", "operator")


@pytest.fixture
def admin_user(db, django_user_model):
    return _user(django_user_model, "ada", "admin")


@pytest.fixture
def viewer_client(client, viewer):
    client.force_login(viewer)
    return client


@pytest.fixture
def operator_client(client, operator):
    client.force_login(operator)
    return client


@pytest.fixture
def admin_client_(client, admin_user):
    client.force_login(admin_user)
    return client


@pytest.fixture
def fleet(db):
    """One host, a healthy vLLM engine, a down llama.cpp engine, one email and one webhook channel."""
    from dashboard.models import Engine, Host
    from sparkops.alerts.models import NotificationChannel

    host = Host.objects.create(name="spark-1")
    vllm = Engine.objects.create(
        name="vllm-main", kind="vllm", url="http://127.0.0.1:18001", host=host, unit="vllm-main.service", status="up"
    )
    llama = Engine.objects.create(
        name="llama-side",
        kind="llamacpp",
        url="http://127.0.0.1:18002",
        host=host,
        unit="llama-side.service",
        status="down",
        status_reason="connection refused",
    )
    email = NotificationChannel.objects.create(name="ops-mail", kind="email", config={"address": "ops@example.test"})
    hook = NotificationChannel.objects.create(
        name="ops-hook",
        kind="webhook",
        config={"url": "http://127.0.0.1:9/hook", "format": "sparkops"},
        secret="s3cret",
    )
    return {"host": host, "vllm": vllm, "llama": llama, "email": email, "webhook": hook}


@pytest.fixture
def redis_url():
    return settings.CELERY_BROKER_URL


HEAVY_FIRST = (  # what takes longest, handed out first (longest-first keeps one worker from finishing alone)
    # the crawls, two xdist groups, each on one worker (a group shares a world: tests/test_crawl.py crawl_world)
    lambda item: item.module.__name__ == "tests.test_crawl" and item.get_closest_marker("xdist_group") is not None,
    lambda item: ".realsystemd." in item.module.__name__,  # they wait on the real manager's clock
    lambda item: item.get_closest_marker("browser") is not None,
    lambda item: item.module.__name__ == "tests.test_stack" or ".realengine." in item.module.__name__,
)


# The tiers. `slow` is what `make test-fast` (`-m "not slow"`) leaves out: every test that starts a
# stack, a browser, a systemd manager (a real one, or the simulated box's sim-systemd), a real engine,
# a PostgreSQL of its own or the shared web server, and those below (a module, or `module::test`):
# they build, install or run SparkOps as subprocesses, or wait out seconds of real time by design.
TIER_MARKERS = (
    "slow: left out of `make test-fast` (tests/conftest.py marks it; implied by the markers below)",
    "realsystemd: runs under a real systemd user manager (tests/realsystemd)",
    "realengine: drives a real engine build, llama.cpp or vLLM (tests/realengine)",
    "simbox: starts a simulated box (simulator.client.Simulation: sim-systemd and its engines)",
    "privatepg: starts a PostgreSQL server of its own (tests/privatepg.PrivatePostgres)",
    "webserver: needs the test process's uvicorn (the `shared_web` fixture)",
    "netns: builds network namespaces and veth links (tests/fleet/netns.py); `make test` runs these after the"
    " rest, alone: a link added in the root namespace makes Chromium abort its loads (ERR_NETWORK_CHANGED)",
)
WEB_FIXTURES = frozenset({"chromium", "shared_web", "_shared_web_server", "asgi_server", "live_server"})
SLOW_MODULES = {
    "tests.test_crawl": "every page of a populated world, in two xdist groups of their own",
    "tests.test_crawl_found": "the crawl's findings, each against the crawl's world",
    "tests.test_packaging": "builds the wheel and installs it into a fresh venv",
    "tests.test_one_install": "runs `sparkops up` and commands from other shells",
    "tests.test_backup": "backs up and restores an install through the CLI",
    "tests.test_settings": "`check --deploy` and bad settings, each in a fresh interpreter",
    "tests.test_static_compressed": "collects the static files (compressed) and serves them",
    "tests.test_xdist_groups": "runs a small project of its own under three xdist workers",
    "tests.changelog.test_import_whole": "imports and exports a whole field log into empty databases",
    "tests.changelog.test_scale": "a change log of the field reports' size",
    "tests.test_cli_lists::test_help_of_one_command_is_still_djangos": "runs `sparkops --help` as a subprocess",
    "tests.probes.test_regression": "whole quality probes, run on a schedule, against simulated engines",
    "tests.sweeps.test_sweep": "sweeps at known token rates: seconds of real streaming each",
    "tests.simulator.test_timing_and_faults": "the simulator's token timing, measured in real time",
    "tests.experiments.test_verdict": "A/B arms run to a verdict against simulated engines",
    "tests.experiments.test_cli": "A/B runs through the CLI",
    "tests.live.test_consumers::test_an_idle_socket_stays_subscribed": "outlasts redis-py's 5 s read timeout",
    "tests.collectors.test_resident::test_a_hung_engine_never_delays_the_other_engines_probes": (
        "times the probes' 0.25 s cadence against hung ticks, for up to 40 s"
    ),
}
HEAVY_MARKERS = ("browser", "stack", "realsystemd", "realengine", "simbox", "privatepg", "webserver", "netns")
STARTERS = {"simbox": "Simulation(", "privatepg": "PrivatePostgres(", "netns": "FleetNet("}  # marker: what it builds


def pytest_itemcollected(item):
    """Each test's tier, marked as it is collected (before `-m` selects): its directory, its
    fixtures and its code say what it starts, so a new test in tests/realsystemd, one asking for
    `chromium` or one whose module or fixtures start a `Simulation(` or a `PrivatePostgres(` is
    slow without anybody remembering to say so."""
    module = item.module.__name__ if getattr(item, "module", None) else ""
    fixtures = set(getattr(item, "fixturenames", ()))
    if ".realsystemd." in module:
        item.add_marker("realsystemd")
    if ".realengine." in module:
        item.add_marker("realengine")
    if fixtures & WEB_FIXTURES:
        item.add_marker("webserver")
    if "chromium" in fixtures and item.get_closest_marker("browser") is None:
        item.add_marker("browser")
    for marker, constructor in STARTERS.items():
        if _constructs(item, constructor):
            item.add_marker(marker)
    named = module in SLOW_MODULES or f"{module}::{getattr(item, 'originalname', item.name)}" in SLOW_MODULES
    if named or any(item.get_closest_marker(name) for name in HEAVY_MARKERS):
        item.add_marker("slow")


def _constructs(item, constructor: str) -> bool:
    """Whether ITEM's module or one of the fixtures it uses calls CONSTRUCTOR (e.g. `Simulation(`)."""
    sources = [getattr(item, "module", None)]
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info else ():
        sources += [d.func for d in defs]
    return any(_says(source, constructor) for source in sources if source is not None)


@functools.cache
def _says(obj, text: str) -> bool:
    try:
        return text in inspect.getsource(obj)
    except (OSError, TypeError):  # a builtin, or code without a source file
        return False


def pytest_configure(config):
    """The test process's garbage collector runs less often: a test makes hundreds of thousands of
    short-lived objects (template contexts, querysets, model instances), and CPython's default
    threshold (700 allocations) ran a collection every few of them. At 50,000 the crawl's URL test
    and the change-log tests took 5-8 % less CPU (32.6-32.9 -> 30.7-31.0 s user, measured
    alternately); cycles are still collected."""
    import gc

    gc.set_threshold(50_000, 50, 100)
    for line in TIER_MARKERS:
        config.addinivalue_line("markers", line)
    _a_port_block_per_worker(config)


def _a_port_block_per_worker(config):
    """Each xdist worker picks its servers' ports from its own block (sparkops.ports): a port one
    worker's simulator picked, or freed while it stopped an engine, is never the one another
    worker's picks next. (CI once met a vLLM unit whose port a llama.cpp answered.)"""
    import os

    from sparkops import ports

    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or os.environ.get(ports.RANGE_ENV):
        return
    low, _high = ports.ephemeral_range()
    count, me = int(workerinput["workercount"]), int(workerinput["workerid"].removeprefix("gw"))
    size = (low - ports.BELOW_FROM) // count
    if size >= 500:
        start = ports.BELOW_FROM + me * size
        os.environ[ports.RANGE_ENV] = f"{start}-{start + size}"  # the servers it starts inherit it


def pytest_collection_finish(session):
    """What collection imported (Django, the apps, every test module) lives for the whole run: it
    goes to the collector's permanent generation, so no full collection walks it again."""
    import gc

    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config, items):
    """The heavy tests first, each class in collection order: under pytest-xdist each worker takes
    the next test as it finishes one, so a 30 s browser sweep handed out last made the others
    wait for it; handed out first, the short tests fill in around it."""

    def rank(item):
        for i, heavy in enumerate(HEAVY_FIRST):
            if heavy(item):
                return i
        return len(HEAVY_FIRST)

    items[:] = sorted(items, key=rank)  # stable: collection order within a class
