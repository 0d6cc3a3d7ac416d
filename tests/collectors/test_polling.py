"""Engine polling end to end against real loopback servers: storage, status, restarts,
the automatic KV-pool ledger, liveness re-checks, and the alerts a tick evaluates."""

import time

import pytest

from dashboard.models import Engine, KVPoolEntry
from dashboard.selectors.series import latest_value
from sparkops.poller import fetch, liveness
from sparkops.poller.pending import PendingWrites
from tests.collectors.conftest import fixture_bytes
from tests.polls import poll, poll_one

pytestmark = pytest.mark.django_db(transaction=True)


def vllm_routes(metrics):
    body = fixture_bytes("vllm", metrics) if isinstance(metrics, str) else metrics
    return {
        "/health": (200, b"", {}),
        "/metrics": (200, body, {"Content-Type": "text/plain; version=0.0.4"}),
        "/v1/models": (200, fixture_bytes("vllm", "0.33.0_v1_models.json"), {"Content-Type": "application/json"}),
    }


def test_poll_stores_reading_and_evaluates_its_rules(fleet, http_server):
    from sparkops.alerts.models import RuleState

    engine = fleet["vllm"]
    Engine.objects.filter(pk=engine.pk).update(url=http_server(vllm_routes("0.33.0_metrics_busy.txt")))
    engine.refresh_from_db()
    reading = poll_one(engine)
    engine.refresh_from_db()
    assert engine.status == "up" and engine.latest["kv_pool_tokens"] == 766464 and engine.last_ok_at
    assert reading["models"] == ["Qwen/Qwen3-8B"] and reading["requests_running"] == 2.0
    assert latest_value(metric="requests_running", engine=engine) == 2.0
    assert latest_value(metric="up", engine=engine) == 1.0
    # The tick evaluated the engine's rules after storing: their memories are in the database.
    assert RuleState.objects.filter(subject="vllm-main").exists()
    entry = KVPoolEntry.objects.get(engine=engine)
    assert entry.pool_tokens == 766464 and entry.source == "collector" and entry.memory_share == 0.92


def test_restart_with_smaller_pool_adds_ledger_row_and_no_negative_rate(fleet, http_server):
    engine = fleet["vllm"]
    routes = vllm_routes("0.33.0_metrics_busy.txt")
    Engine.objects.filter(pk=engine.pk).update(url=http_server(routes))
    engine.refresh_from_db()
    poll_one(engine)
    routes.update(vllm_routes("0.33.0_metrics_after_restart_smaller_pool.txt"))
    time.sleep(0.05)
    reading = poll_one(engine)
    assert reading["restarted"] is True and reading["prompt_tokens_per_s"] is None
    assert latest_value(metric="restarts", engine=engine) == 1.0
    rows = list(KVPoolEntry.objects.filter(engine=engine).order_by("recorded_at"))
    assert [r.pool_tokens for r in rows] == [766464, 524288]
    assert rows[1].previous_id == rows[0].pk and "766464 → 524288" in rows[1].note and "0.92 → 0.85" in rows[1].note


def test_a_ledger_row_is_held_with_the_reading_and_stored_by_the_flush(fleet, http_server):
    """Deriving a reading touches no KV-pool ledger row: the row is held with the tick's other
    rows (a changed pool asks for a store at once) and written by the flush, in its transaction."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from dashboard.samples import store

    engine = fleet["vllm"]
    Engine.objects.filter(pk=engine.pk).update(url=http_server(vllm_routes("0.33.0_metrics_busy.txt")))
    engine.refresh_from_db()
    states = {}
    [(_, fetched)] = fetch.engines_fetch(engines=[engine], states=states)
    pending = PendingWrites(store.SeriesIds())
    with CaptureQueriesContext(connection) as queries:
        reading = pending.add_engine(engine, fetched, states)
    assert reading["kv_pool_tokens"] == 766464 and pending.urgent and len(pending.kv_writes) == 1
    assert not [q["sql"] for q in queries.captured_queries if "kvpoolentry" in q["sql"].lower()]
    assert not KVPoolEntry.objects.exists()
    pending.flush()
    entry = KVPoolEntry.objects.get(engine=engine)
    assert entry.pool_tokens == 766464 and entry.note == "first pool seen by the collector"
    assert not pending.kv_writes


def test_refused_engine_is_down_with_reason_and_others_still_polled(fleet, http_server):
    good = fleet["vllm"]
    Engine.objects.filter(pk=good.pk).update(url=http_server(vllm_routes("0.33.0_metrics_busy.txt")))
    readings = {r["name"]: r for r in poll(*Engine.objects.all())}
    assert readings["vllm-main"]["up"] is True
    assert readings["llama-side"]["up"] is False and "refused" in readings["llama-side"]["error"]
    llama = Engine.objects.get(name="llama-side")
    assert llama.status == "down" and "refused" in llama.status_reason
    assert latest_value(metric="up", engine=llama) == 0.0


def test_liveness_recheck_and_status_change(fleet, http_server):
    llama = fleet["llama"]  # down in the fixture, nothing listens on its port
    [result] = liveness.engines_probe(engines=[llama])
    assert result.status == "down" and result.rechecked is True and not result.changed
    Engine.objects.filter(pk=llama.pk).update(url=http_server({"/health": (503, b'{"error":{"code":503}}', {})}))
    llama.refresh_from_db()
    [result] = liveness.engines_probe(engines=[llama])
    assert result.status == "loading" and result.rechecked is False and result.changed and not result.up
    assert Engine.objects.get(pk=llama.pk).status == "loading"
