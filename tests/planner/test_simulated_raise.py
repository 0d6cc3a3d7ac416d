"""The corrected window-raise figure on a simulated vLLM under its systemd unit, whose pool
shrinks as the window grows (the simulator takes non-KV workspace out of the budget per doubling
of --max-model-len, simulator/units.py). The collector writes the ledger rows after
each restart; an earlier raise of the same engine makes the next raise's corrected figure land
on the measurement where the naive one ("allocates nothing") misses it."""

import pytest
from django.conf import settings as django_settings

from dashboard.models import Engine, Host, KVPoolEntry
from tests.simbox import point_collectors_at

from .conftest import plan_json

pytestmark = [pytest.mark.django_db(transaction=True)]

UNIT = (
    "[Service]\nExecStart=\nExecStart=/opt/vllm/bin/vllm serve nvidia/Nemotron-3.5-Lightning --host 127.0.0.1 "
    "--port {port} --max-model-len {n} --gpu-memory-utilization 0.25 --enable-prefix-caching\n"
)


@pytest.fixture
def sim_box(tmp_path, settings, monkeypatch):
    from simulator.client import Simulation

    with Simulation(engines=["vllm:nemotron,max_model_len=65536,memory_share=0.25"], state_dir=tmp_path / "sim") as s:
        point_collectors_at(s, settings, monkeypatch)
        yield s


def _tick(engine):
    from sparkops.poller.resident import ResidentPoller

    ResidentPoller(engine.host.name, duties={}, flush_interval=0).metrics_tick(engines=[engine])


def _restart_at(sim, engine, window):
    port = sim.url("nemotron").rsplit(":", 1)[1]
    sim.dropin("nemotron", "20-window.conf", UNIT.format(port=port, n=window))
    sim.restart("nemotron")
    sim.wait_ready("nemotron")
    _tick(engine)
    return KVPoolEntry.objects.filter(engine=engine).latest("recorded_at")


def test_an_earlier_raise_corrects_the_next_one(sim_box):
    host = Host.objects.create(name=django_settings.SPARKOPS_HOST_NAME)
    engine = Engine.objects.create(
        name="nemotron", kind="vllm", url=sim_box.url("nemotron"), host=host, unit=sim_box.unit("nemotron")
    )
    _tick(engine)
    first = KVPoolEntry.objects.get(engine=engine)
    assert (first.window, first.memory_share, first.source) == (65536, 0.25, "collector")
    # Issue 30 §2: the KV memory comes from the engine's boot line in the journal, no hand entry.
    printed = round(first.pool_tokens / 31443.0, 2)  # the simulator's kv_tokens_per_gib
    assert first.kv_memory_bytes == round(printed * 1024**3)
    learned = plan_json("--engine", "nemotron", "--util", "0.3")
    assert learned["tokens_per_gib"] == round(first.pool_tokens / printed)
    assert learned["pool_tokens"] > first.pool_tokens  # a larger share predicts a larger pool

    # With no raise of its own in the ledger, a raise is naive plus a range.
    p = plan_json("--engine", "nemotron", "--util", "0.25", "--window", "131072")
    assert p["corrected_concurrency"] is None and p["concurrency_range"][1] == p["naive_concurrency"]

    second = _restart_at(sim_box, engine, 131072)  # the earlier raise, 65,536 → 131,072
    assert second.window == 131072 and second.pool_tokens < first.pool_tokens  # the workspace grew
    assert second.kv_memory_bytes == round(round(second.pool_tokens / 31443.0, 2) * 1024**3)  # this boot's line

    p = plan_json("--engine", "nemotron", "--util", "0.25", "--window", "262144")
    assert p["base_window"] == 131072 and {first.pk, second.pk} <= {r["id"] for r in p["basis"]}
    naive, corrected = p["naive_concurrency"], p["corrected_concurrency"]
    assert corrected is not None and corrected < naive

    third = _restart_at(sim_box, engine, 262144)  # the raise itself, measured after the restart
    measured = third.pool_tokens / 262144
    assert third.window == 262144
    assert abs(corrected - measured) < abs(naive - measured)
    assert abs(corrected - measured) / measured < 0.005 < abs(naive - measured) / measured
