"""Live-view fixtures: sockets through the real ASGI stack (session cookie, Redis channel layer)."""

import contextlib

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings


@pytest.fixture(autouse=True)
def _no_persistent_connections():
    """Consumers touch the DB from executor threads; with CONN_MAX_AGE those connections would
    outlive the test and block dropping the test database."""
    from django.db import connections

    saved = connections.settings["default"]["CONN_MAX_AGE"]
    connections.settings["default"]["CONN_MAX_AGE"] = 0
    yield
    connections.settings["default"]["CONN_MAX_AGE"] = saved


@pytest.fixture(autouse=True)
def _no_viewer_yet():
    """Each test starts with no viewer anywhere: no presence key in Redis (under this run's
    channel prefix). Nothing in this process remembers an answer: each publisher has its own,
    and this process's sockets forget when they last set the key (else the first socket of the
    next test, within half a refresh period, skips setting the key this fixture deleted)."""
    from sparkops.live.presence import presence_key, sockets

    def clear():
        sockets._marked_at = float("-inf")
        client, key = presence_key()
        if client is not None:
            with contextlib.suppress(Exception):  # the tests that need Redis will say so themselves
                client.delete(key)

    clear()
    yield
    clear()


@pytest.fixture
def sent(layer, monkeypatch):
    """Every group_send this process makes from now on, as (group, event type) — a spy on the
    channel layer the publisher uses (the sends still happen)."""
    calls = []
    original = layer.group_send

    def spy(group, message):
        calls.append((group, message.get("event", {}).get("type")))
        return original(group, message)

    monkeypatch.setattr(layer, "group_send", spy)
    return calls


@pytest.fixture
def session_cookie():
    """Cookie header of a real logged-in session for USER (what the browser would send)."""
    from .helpers import session_key

    def make(user):
        return f"{settings.SESSION_COOKIE_NAME}={session_key(user)}".encode()

    return make


@pytest.fixture
def open_socket(session_cookie):
    """Open ws/live/ as USER (None: anonymous) on the project's ASGI application."""
    from sparkops.asgi import application

    async def make(user=None, groups=""):
        headers = [(b"origin", b"http://127.0.0.1")]
        if user is not None:
            headers.append((b"cookie", await _cookie(session_cookie, user)))
        comm = WebsocketCommunicator(application, f"/ws/live/?groups={groups}", headers=headers)
        return comm

    return make


async def _cookie(session_cookie, user):
    from channels.db import database_sync_to_async

    return await database_sync_to_async(session_cookie)(user)


@pytest.fixture
def layer():
    return get_channel_layer()
