"""Shared fixtures: named personas and a standard fleet (healthchecks' hc/test.py style).

Tests use the real PostgreSQL and Redis when DATABASE_URL / REDIS_URL point at them (CI
sets both); otherwise SQLite and the private Redis that `make test` starts."""

import pytest
from django.conf import settings

from dashboard.roles import set_role


@pytest.fixture(scope="session", autouse=True)
def _close_the_main_threads_http_client():
    """Tests that tick a poller in the main thread leave its event loop and aiohttp session
    open; close them while the session's output is still captured."""
    yield
    from dashboard.collectors import runner

    runner.close()


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
    append-only triggers (dashboard/changelog/dbguard.py) rightly refuse for a locked entry —
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


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


@pytest.fixture(scope="module")
def chromium():
    """One headless Chromium (Debian's) for a test module: launching one per test cost a second or
    two of a core each time. Playwright's sync API holds an event loop in this thread while it
    runs, so the module's database calls are allowed beside it (DJANGO_ALLOW_ASYNC_UNSAFE, as each
    browser test used to set)."""
    import os

    from playwright.sync_api import sync_playwright

    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


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
    from dashboard.alerts.models import NotificationChannel
    from dashboard.models import Engine, Host

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
