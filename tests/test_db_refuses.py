"""When the database cannot be written (issue 31, item 6): /healthz and the heartbeat say so at
once, pages answer 503 with a one-line reason (JSON on /api/), and a change-log entry the
database refuses is a form error that keeps what was typed.

The refusal is the database's own (tests/dbfaults.read_only: SQLite's PRAGMA query_only,
PostgreSQL's default_transaction_read_only for this session), the way a full disk or a
database switched to read-only refuses: reads answer, every write fails. Transactional tests:
the read-only switch applies to the connection's next transactions, which a test inside one
open transaction would not have."""

import json

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from dashboard.heartbeat import Heartbeat
from dashboard.models import Engine, Host
from dashboard.tokens.models import ApiToken
from tests.dbfaults import read_only, refusing

pytestmark = pytest.mark.django_db(transaction=True)


def _fresh(fleet):
    Engine.objects.filter(pk=fleet["vllm"].pk).update(last_poll_at=timezone.now())
    Host.objects.filter(pk=fleet["host"].pk).update(last_report_at=timezone.now())


def test_healthz_and_the_heartbeat_say_at_once_that_the_database_cannot_be_written(client, fleet):
    _fresh(fleet)
    assert client.get("/healthz").status_code == 200
    beat = Heartbeat("http://127.0.0.1:9/ping")
    with read_only():
        response = client.get("/healthz")
        target = beat()  # the leader's duty: judged now, sent on its own thread
    beat.join(15)
    body = response.json()
    assert response.status_code == 503 and body["database"] == "read_only", body
    assert body["message"].startswith("The database cannot be written: it is read-only."), body
    assert any(p.startswith("database: cannot be written: the database is read-only") for p in body["problems"]), body
    assert target == "http://127.0.0.1:9/ping/fail"  # the checker pages
    assert client.get("/healthz").status_code == 200  # written again: healthy again


def test_api_answers_503_json_with_the_reason(fleet, viewer):
    """A token's first use writes its last_used_at (a middleware): the write the full disk refuses."""
    _, token = ApiToken.issue(viewer, name="test")
    client = Client(raise_request_exception=False)
    with read_only():
        response = client.get("/api/engines/", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 503 and response["Content-Type"] == "application/json"
    body = json.loads(response.content)
    assert body["error"] == "database unavailable" and body["database"] == "read_only", body
    assert body["reason"].startswith("the database is read-only: it cannot be written"), body
    assert response["Retry-After"] == "30"


def test_a_database_that_does_not_answer_in_time_is_named_slow(fleet, viewer):
    """Its table locked by another connection: PostgreSQL gives up after lock_timeout, SQLite
    after busy_timeout ("database is locked"); the API says "slow" with the driver's words."""
    _, token = ApiToken.issue(viewer, name="test")
    client = Client(raise_request_exception=False)
    with refusing(ApiToken):
        response = client.get("/api/engines/", headers={"Authorization": f"Bearer {token}"})
    body = json.loads(response.content)
    assert response.status_code == 503 and body["database"] == "slow", body
    assert body["reason"].startswith("the database is locked and did not answer in time ("), body


def test_login_answers_503_with_a_page_that_says_why(viewer):
    client = Client(raise_request_exception=False)
    with read_only():
        response = client.post("/login/", {"username": "vera", "password": "vera-password-123"})
    text = response.content.decode()
    assert response.status_code == 503 and response["Content-Type"].startswith("text/html")
    assert '<body data-database="read_only">' in text and "<h1>The database is read-only</h1>" in text, text
    assert "503 Service Unavailable: the database is read-only: it cannot be written" in text, text


def test_a_bug_is_still_a_500(viewer):
    """Only the database refusing is a 503: an error of the code stays Django's 500."""
    from dashboard.views.errors import server_error

    request = Client().get("/livez").wsgi_request
    try:
        raise ValueError("a bug")
    except ValueError:
        assert server_error(request).status_code == 500


def test_a_change_log_entry_the_database_refuses_is_a_form_error(operator_client):
    form = {
        "effective_at": "2026-08-20T09:00",
        "kind": "decision",
        "title": "Split the memory evenly",
        "flags": "",
        "body_md": "0.40 each " * 1000,
        "units": "",
        "reason": "",
        "expected_effect": "",
        "claims-TOTAL_FORMS": "0",
        "claims-INITIAL_FORMS": "0",
    }
    connection.ensure_connection()
    with read_only():
        response = operator_client.post("/changelog/new/", form)
    text = response.content.decode()
    assert response.status_code == 503
    assert "Nothing was saved: the database is read-only" in text
    assert "Split the memory evenly" in text  # what was typed is still in the form
