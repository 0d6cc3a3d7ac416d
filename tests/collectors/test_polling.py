"""Engine polling end to end against real loopback servers: storage, status, restarts,
the automatic KV-pool ledger, liveness re-checks and signals after commit."""
import time

import pytest

from dashboard import signals
from dashboard.collectors import store
from dashboard.models import Engine, KVPoolEntry
from dashboard.selectors.series import latest_value
from dashboard.services import polling
from tests.collectors.conftest import fixture_bytes

pytestmark = pytest.mark.django_db(transaction=True)


def vllm_routes(metrics):
    body = fixture_bytes("vllm", metrics) if isinstance(metrics, str) else metrics
    return {"/health": (200, b"", {}), "/metrics": (200, body, {"Content-Type": "text/plain; version=0.0.4"}),
            "/v1/models": (200, fixture_bytes("vllm", "0.33.0_v1_models.json"), {"Content-Type": "application/json"})}


@pytest.fixture(autouse=True)
def _cache():
    store.clear_series_cache()


@pytest.fixture
def caught():
    got = []

    def receiver(sender, **kwargs):
        got.append(kwargs)

    signals.engines_polled.connect(receiver)
    signals.engine_liveness.connect(receiver)
    yield got
    signals.engines_polled.disconnect(receiver)
    signals.engine_liveness.disconnect(receiver)


def test_poll_stores_reading_and_signals(fleet, http_server, caught):
    engine = fleet["vllm"]
    Engine.objects.filter(pk=engine.pk).update(url=http_server(vllm_routes("0.33.0_metrics_busy.txt")))
    engine.refresh_from_db()
    reading = polling.engine_poll(engine=engine)
    engine.refresh_from_db()
    assert engine.status == "up" and engine.latest["kv_pool_tokens"] == 766464 and engine.last_ok_at
    assert reading["models"] == ["Qwen/Qwen3-8B"] and reading["requests_running"] == 2.0
    assert latest_value(metric="requests_running", engine=engine) == 2.0
    assert latest_value(metric="up", engine=engine) == 1.0
    [(polled_engine, polled_reading)] = caught[0]["polled"]  # one batch signal for the cycle
    assert polled_engine.pk == engine.pk and polled_reading["name"] == "vllm-main"
    entry = KVPoolEntry.objects.get(engine=engine)
    assert entry.pool_tokens == 766464 and entry.source == "collector" and entry.memory_share == 0.92


def test_restart_with_smaller_pool_adds_ledger_row_and_no_negative_rate(fleet, http_server):
    engine = fleet["vllm"]
    routes = vllm_routes("0.33.0_metrics_busy.txt")
    Engine.objects.filter(pk=engine.pk).update(url=http_server(routes))
    engine.refresh_from_db()
    polling.engine_poll(engine=engine)
    routes.update(vllm_routes("0.33.0_metrics_after_restart_smaller_pool.txt"))
    time.sleep(0.05)
    reading = polling.engine_poll(engine=engine)
    assert reading["restarted"] is True and reading["prompt_tokens_per_s"] is None
    assert latest_value(metric="restarts", engine=engine) == 1.0
    rows = list(KVPoolEntry.objects.filter(engine=engine).order_by("recorded_at"))
    assert [r.pool_tokens for r in rows] == [766464, 524288]
    assert rows[1].previous_id == rows[0].pk and "766464 → 524288" in rows[1].note and "0.92 → 0.85" in rows[1].note


def test_refused_engine_is_down_with_reason_and_others_still_polled(fleet, http_server):
    good = fleet["vllm"]
    Engine.objects.filter(pk=good.pk).update(url=http_server(vllm_routes("0.33.0_metrics_busy.txt")))
    readings = {r["name"]: r for r in polling.engines_poll(engines=Engine.objects.all())}
    assert readings["vllm-main"]["up"] is True
    assert readings["llama-side"]["up"] is False and "refused" in readings["llama-side"]["error"]
    llama = Engine.objects.get(name="llama-side")
    assert llama.status == "down" and "refused" in llama.status_reason
    assert latest_value(metric="up", engine=llama) == 0.0


def test_liveness_recheck_and_status_change(fleet, http_server, caught):
    llama = fleet["llama"]  # down in the fixture, nothing listens on its port
    [result] = polling.engines_probe(engines=[llama])
    assert result["status"] == "down" and result["rechecked"] is True
    Engine.objects.filter(pk=llama.pk).update(url=http_server({"/health": (503, b'{"error":{"code":503}}', {})}))
    llama.refresh_from_db()
    [result] = polling.engines_probe(engines=[llama])
    assert result["status"] == "loading" and result["rechecked"] is False
    assert Engine.objects.get(pk=llama.pk).status == "loading"
    live = [c for c in caught if "up" in c and "rechecked" in c]
    assert [c["up"] for c in live] == [False, False]
