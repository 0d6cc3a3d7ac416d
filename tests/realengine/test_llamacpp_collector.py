"""SparkOps's llama.cpp collector and poller against a real llama-server (tests/realengine/build.sh):
every endpoint parses, the figures are the server's own, busy slots and a queue show, a restart is
a restart. The recorded fixtures in tests/fixtures/llamacpp say what one build answered; this says
the build CI pins still answers it."""

import threading
import time

import pytest

from dashboard.http import sync_client
from dashboard.models import Engine, Host
from dashboard.selectors.series import latest_value
from sparkops.collectors import runner
from sparkops.collectors.base import collector_for
from tests.polls import poll_one
from tests.realengine.conftest import ALIAS, N_CTX, N_SLOTS, start_llama_server, stop

pytestmark = pytest.mark.django_db(transaction=True)

PROMPT = "the secret code of the city is the answer to the question in the document"


def server_metrics(url):
    """{name: value} of the server's own /metrics text, read apart from SparkOps's parser."""
    text = sync_client().get(url + "/metrics", timeout=5).text
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line and line[0] != "#"}


def engine_at(url, name="llama-real"):
    host, _ = Host.objects.get_or_create(name="spark-real")
    return Engine.objects.create(name=name, kind="llamacpp", url=url, host=host, status="down")


def complete(url, n_predict, prompt=PROMPT, **extra):
    body = {"prompt": prompt, "n_predict": n_predict, "ignore_eos": True, "cache_prompt": True, **extra}
    response = sync_client().post(url + "/completion", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def test_every_endpoint_of_a_real_server_parses(llama_server):
    coll = collector_for("llamacpp")
    bodies = runner.run(lambda client: coll.fetch(client, llama_server.url, timeout=5, refresh=True))
    assert sorted(bodies) == ["health", "metrics", "models", "props", "slots"]
    snap = coll.snapshot(bodies)
    assert snap.status == "up" and snap.error is None and snap.info["problems"] == {}
    assert snap.models == [ALIAS]
    assert snap.kv == {"window": N_CTX, "pool_tokens": N_CTX * N_SLOTS}
    assert snap.info["build"].startswith("b") and "-" in snap.info["build"]  # b<build number>-<commit>
    # Every family the collector reads is one this build exports (none silently None)...
    assert all(v is not None for v in snap.counters.values()), snap.counters
    assert snap.gauges["requests_running"] == 0 and snap.gauges["requests_waiting"] == 0
    # ...and KV usage, which llama.cpp no longer exports, comes from /slots: idle is 0.
    assert snap.gauges["kv_cache_usage"] == 0.0
    assert "llamacpp:kv_cache_usage_ratio" not in server_metrics(llama_server.url)


def test_poll_figures_are_the_servers_own(llama_server):
    engine = engine_at(llama_server.url)
    first = poll_one(engine)
    own = server_metrics(llama_server.url)  # nothing ran in between: the same counters
    assert first["up"] is True and first["status"] == "up" and first["error"] is None
    assert first["models"] == [ALIAS] and first["window"] == N_CTX and first["kv_pool_tokens"] == N_CTX * N_SLOTS
    assert first["prompt_tokens_total"] == own["llamacpp:prompt_tokens_total"]
    assert first["prefix_cache_hits_total"] == own["llamacpp:prompt_tokens_cached_total"]
    assert first["generation_tokens_total"] == own["llamacpp:tokens_predicted_total"]

    done = complete(llama_server.url, 24)
    timings = done["timings"]
    assert timings["predicted_n"] == 24 and done["stop_type"] == "limit"
    time.sleep(0.05)
    second = poll_one(engine)
    assert second["restarted"] is False
    assert second["generation_tokens_total"] - first["generation_tokens_total"] == 24
    assert second["prompt_tokens_total"] - first["prompt_tokens_total"] == timings["prompt_n"]
    assert second["prefix_cache_hits_total"] - first["prefix_cache_hits_total"] == timings["cache_n"]
    queries = second["prefix_cache_queries_total"] - first["prefix_cache_queries_total"]
    assert queries == timings["prompt_n"] + timings["cache_n"]  # prompt_tokens_total excludes the cached ones
    assert second["generation_tokens_per_s"] > 0 and second["prompt_tokens_per_s"] > 0

    # The same prompt again: llama.cpp reuses the slot's cached prefix, and the hit rate says so.
    again = complete(llama_server.url, 8)["timings"]
    assert again["cache_n"] >= timings["prompt_n"] + timings["cache_n"] - 1, again
    time.sleep(0.05)
    third = poll_one(engine)
    hits = third["prefix_cache_hits_total"] - first["prefix_cache_hits_total"]
    asked = third["prefix_cache_queries_total"] - first["prefix_cache_queries_total"]
    assert hits == timings["cache_n"] + again["cache_n"] and asked == queries + again["prompt_n"] + again["cache_n"]
    assert third["prefix_cache_hit_rate"] == pytest.approx(hits / asked)
    assert 0.4 < third["prefix_cache_hit_rate"] < 1
    engine.refresh_from_db()
    assert engine.status == "up" and engine.last_ok_at is not None
    assert latest_value(metric="prefix_cache_hit_rate", engine=engine) == pytest.approx(hits / asked)
    assert latest_value(metric="kv_pool_tokens", engine=engine) == N_CTX * N_SLOTS


def three_generations_polled(url, engine, n_predict):
    """Three generations of N_PREDICT tokens on two slots, polled until they are done."""
    results, errors = [], []

    def generate(i):
        try:
            results.append(complete(url, n_predict, prompt=f"{PROMPT} {i}", cache_prompt=False))
        except Exception as exc:  # surfaced by the caller, with the readings
            errors.append(exc)

    threads = [threading.Thread(target=generate, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    readings = []
    while any(t.is_alive() for t in threads) and len(readings) < 1000:
        readings.append(poll_one(engine))
    for thread in threads:
        thread.join(timeout=120)
    # And once they are done: llama.cpp adds a generation's tokens to its counter when the generation ends,
    # so on a loaded box the last one could end after the last poll above and no reading saw them counted.
    readings.append(poll_one(engine))
    assert not errors and len(results) == 3, errors
    assert all(r["timings"]["predicted_n"] == n_predict for r in results)
    return results, readings


def test_busy_slots_and_a_queue_show_while_requests_run(llama_server):
    """Three long generations on two slots: the poll sees both slots busy and one request
    deferred, and a KV usage from /slots that counts the decoded tokens, not the prompts alone."""
    engine = engine_at(llama_server.url)
    poll_one(engine)
    # Decoding speed on a shared 2-core box varies tenfold: a round too quick to be caught
    # both-busy-and-queued by a poll is run again, longer.
    for n_predict in (1000, 2000, 4000, 8000):
        results, readings = three_generations_polled(llama_server.url, engine, n_predict)
        busy = [r for r in readings if r["requests_running"] == 2 and r["requests_waiting"] == 1]
        if busy:
            break
    assert busy, [(r["requests_running"], r["requests_waiting"]) for r in readings]
    prompts = sum(r["timings"]["prompt_n"] + r["timings"]["cache_n"] for r in results)
    assert all(0 < r["kv_cache_usage"] <= 1 for r in busy)
    assert max(r["kv_cache_usage"] for r in readings) > prompts / (N_CTX * N_SLOTS)
    assert max(r["generation_tokens_per_s"] or 0 for r in readings) > 0
    idle = poll_one(engine)
    assert idle["requests_running"] == 0 and idle["requests_waiting"] == 0 and idle["kv_cache_usage"] == 0.0


def test_a_restarted_server_is_down_then_restarted_with_no_negative_rate(llama_build, tmp_path):
    server, model = llama_build
    first = start_llama_server(server, model, tmp_path / "first.log")
    try:
        engine = engine_at(first.url, name="llama-restart")
        complete(first.url, 32)
        before = poll_one(engine)
        assert before["up"] is True and before["generation_tokens_total"] >= 32
    finally:
        assert stop(first.process) == 0  # SIGTERM: llama-server exits 0
    down = poll_one(engine)
    engine.refresh_from_db()
    assert down["up"] is False and engine.status == "down" and "refused" in engine.status_reason

    second = start_llama_server(server, model, tmp_path / "second.log")
    try:
        Engine.objects.filter(pk=engine.pk).update(url=second.url)  # a fresh port: same engine, new process
        engine.refresh_from_db()
        after = poll_one(engine)
        assert after["up"] is True and after["restarted"] is True
        assert after["generation_tokens_total"] < before["generation_tokens_total"]
        assert after["generation_tokens_per_s"] is None and after["prompt_tokens_per_s"] is None
        assert latest_value(metric="restarts", engine=engine) == 1.0
    finally:
        stop(second.process)
