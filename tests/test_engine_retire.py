"""Engines retire instead of vanishing (issue 14, item 3): `sparkops engine remove` stops
watching an engine and takes it off the live view, and everything that points at it stays —
the change log byte for byte, alert events and their deliveries, ledgers, benchmark runs."""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.db.models import ProtectedError
from django.utils import timezone

from dashboard.models import Engine, Incident, KVPoolEntry
from sparkops.alerts.models import AlertEvent, Delivery
from sparkops.changelog.export import export_markdown
from sparkops.changelog.grammar import parse_flags
from sparkops.changelog.services import entry_create
from sparkops.poller.fleet import fleet_roles


def run(*args):
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.fixture
def history(fleet):
    engine, now = fleet["llama"], timezone.now()
    entry = entry_create(
        effective_at=now - timedelta(days=3),
        kind="flag_change",
        title="Smaller batch",
        engines=[engine, fleet["vllm"]],
        flags=parse_flags("--batch-size: 2048 → 512"),
        claims=[{"text": "halves the workspace", "metric": "pool_tokens", "predicted": 1e6, "engine": engine}],
    )
    event = AlertEvent.objects.create(
        rule="engine_down",
        severity="critical",
        state="resolved",
        engine=engine,
        subject=engine.name,
        message="down",
        started_at=now - timedelta(hours=2),
    )
    Delivery.objects.create(
        event=event,
        channel=fleet["email"],
        transition="firing",
        idempotency_key="k-1",
        next_attempt_at=now,
        created_at=now,
        status="sent",
    )
    KVPoolEntry.objects.create(recorded_at=now - timedelta(days=1), engine=engine, pool_tokens=1_000_000)
    Incident.objects.create(opened_at=now - timedelta(days=2), engine=engine, trigger="OOM kill")
    return {**fleet, "entry": entry, "event": event}


def test_engine_remove_retires_and_keeps_every_record(history):
    before = export_markdown()
    assert "Engines: llama-side, vllm-main" in before
    out = run("engine", "remove", "llama-side")
    assert "retired engine llama-side" in out
    engine = Engine.objects.get(name="llama-side")
    assert engine.retired_at is not None and not engine.expected_up
    assert export_markdown() == before  # the locked log's Engines: lines and predictions are untouched
    assert history["entry"].engines.count() == 2
    assert AlertEvent.objects.filter(engine=engine).count() == 1 and Delivery.objects.count() == 1
    assert engine.kv_pool_entries.count() == 1 and engine.incidents.count() == 1
    listed = {e["name"]: e for e in json.loads(run("engine", "list", "--json"))}
    assert listed["llama-side"]["status"] == "retired" and listed["vllm-main"]["status"] == "up"
    with pytest.raises(CommandError, match="already retired"):
        run("engine", "remove", "llama-side")


def test_a_retired_engine_is_not_polled(history):
    engines, _ = fleet_roles(host=history["host"])
    assert {e.name for e in engines} == {"vllm-main", "llama-side"}
    run("engine", "remove", "llama-side")
    engines, _ = fleet_roles(host=history["host"])
    assert [e.name for e in engines] == ["vllm-main"]


def test_live_view_hides_it_and_its_page_says_retired(history, viewer_client):
    run("engine", "remove", "llama-side")
    overview = viewer_client.get("/").content.decode()
    assert 'data-engine="vllm-main"' in overview and 'data-engine="llama-side"' not in overview
    page = viewer_client.get("/engines/llama-side/").content.decode()
    assert 'id="retired-badge"' in page and "sparkops engine add llama-side" in page
    assert 'id="retired-badge"' not in viewer_client.get("/engines/vllm-main/").content.decode()
    assert ">retired<" in viewer_client.get("/engines/").content.decode()


def test_engine_add_of_a_retired_name_watches_it_again(history):
    run("engine", "remove", "llama-side")
    out = run("engine", "add", "llama-side", "--kind", "vllm", "--url", "http://127.0.0.1:18009/")
    assert "watching retired engine llama-side" in out
    engine = Engine.objects.get(name="llama-side")
    assert (engine.retired_at, engine.kind, engine.url, engine.expected_up) == (
        None,
        "vllm",
        "http://127.0.0.1:18009",
        True,
    )
    assert engine.status == "unknown" and engine.alert_events.count() == 1  # same record, same history
    assert "llama-side" in {e.name for e in fleet_roles(host=history["host"])[0]}
    with pytest.raises(CommandError, match="already exists"):
        run("engine", "add", "llama-side", "--kind", "vllm", "--url", "http://127.0.0.1:18009/")


def test_history_protects_an_engine_from_deletion(history):
    for name in ("llama-side", "vllm-main"):
        with pytest.raises(ProtectedError), transaction.atomic():
            Engine.objects.get(name=name).delete()
    assert Engine.objects.count() == 2 and AlertEvent.objects.count() == 1


# --- issue 31, item 3: a retired engine's alerts close, and nothing fires or offers it again ---


def _open(rule, subject):
    return AlertEvent.objects.filter(rule=rule, subject=subject, state__in=AlertEvent.OPEN_STATES).first()


def test_retiring_resolves_its_open_alerts_with_reason_retired(fleet):
    from sparkops.alerts.evaluate import evaluate
    from sparkops.alerts.models import AlertNote

    vllm = fleet["vllm"]
    evaluate("engine_liveness", engine=vllm, up=False, reason="connection refused", rechecked=True)
    firing = _open("engine_down", "vllm-main")
    assert firing is not None and firing.state == "firing" and firing.incident_id
    run("engine", "remove", "vllm-main")
    firing.refresh_from_db()
    assert firing.state == "resolved" and firing.resolved_at is not None
    assert firing.details.get("resolved_reason") == "retired"
    note = AlertNote.objects.filter(event=firing, kind="resolved").get()
    assert "retired" in note.text
    assert Delivery.objects.filter(event=firing, transition="resolved").exists()  # the page is closed too
    assert not AlertEvent.objects.filter(engine=vllm, state__in=AlertEvent.OPEN_STATES).exists()
    assert _open("engine_down", "llama-side") is None  # another engine's alerts are not touched


def test_no_rule_fires_for_a_retired_engine_seen_by_a_poller_that_read_it_before(fleet):
    """The poller read its engine list before the retirement (its Engine object still says
    watched, expected up); its next probe finds the port closed. Nothing opens."""
    from sparkops.alerts.evaluate import evaluate

    stale = Engine.objects.get(name="vllm-main")
    run("engine", "remove", "vllm-main")
    assert stale.retired_at is None and stale.expected_up  # what the poller holds
    evaluate("engine_liveness", engine=stale, up=False, reason="connection refused", rechecked=False)
    evaluate("engine_liveness", engine=stale, up=False, reason="connection refused", rechecked=True)
    evaluate("engine_polled", engine=stale, reading={"kv_cache_usage": 0.99, "requests_waiting": 50})
    assert not AlertEvent.objects.filter(engine__name="vllm-main").exists()


def test_the_planner_does_not_list_a_retired_engine(history, viewer_client):
    from django.urls import reverse

    run("engine", "remove", "llama-side")
    page = viewer_client.get(reverse("planner:host", args=[history["host"].name]))
    assert page.status_code == 200
    assert "llama-side" not in [e["engine"] for e in page.context["data"]["engines"]]
    assert "llama-side" not in [e.name for e in page.context["plan"]["engines"]]


def test_the_benchmark_profile_form_offers_no_retired_engine(fleet, operator_client):
    from django.urls import reverse

    run("engine", "remove", "llama-side")
    page = operator_client.get(reverse("bench:profile-new"))
    assert page.status_code == 200
    offered = {e.name for e in page.context["form"].fields["engine"].queryset}
    assert offered == {"vllm-main"}
    assert 'value="{}"'.format(fleet["llama"].pk) not in page.content.decode()
