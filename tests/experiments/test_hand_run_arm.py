"""Issue 30 §7: an arm served by a hand-run engine (no unit, started from a shell) has a
configuration snapshot — its process's argv and environment, as the poller's hand-run scan reads
them — and the A/B experiment reads it before every repetition instead of saying it has none."""

import pytest
from django.conf import settings as django_settings

from sparkops.experiments.create import experiment_create
from sparkops.experiments.models import Slot
from sparkops.experiments.runner import experiment_advance
from sparkops.experiments.verdict import arm_difference
from tests.simbox import point_collectors_at

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def unit_and_hand_run(tmp_path, settings, monkeypatch, db):
    from dashboard.models import Engine, Host
    from simulator.client import Simulation

    specs = ["vllm:arm-a,rate=50,ttft=0.01", "vllm:smoke,rate=55,ttft=0.01,hand_run=1"]
    with Simulation(engines=specs, state_dir=tmp_path / "sim") as s:
        point_collectors_at(s, settings, monkeypatch, gpu=False)
        box = Host.objects.create(name=django_settings.SPARKOPS_HOST_NAME)
        kw = {"kind": "vllm", "host": box, "status": "up", "latest": {"window": 32768}}
        a = Engine.objects.create(name="arm-a", url=s.url("arm-a"), unit=s.unit("arm-a"), **kw)
        port = s.url("smoke").rsplit(":", 1)[1]
        b = Engine.objects.create(name=f"hand-run-{port}", url=s.url("smoke"), unit="", **kw)
        yield s, a, b


def test_a_hand_run_arm_is_read_from_its_process(unit_and_hand_run):
    sim, a, b = unit_and_hand_run
    assert sim.unit("smoke") == ""  # systemd knows nothing of it
    experiment = experiment_create(
        name="unit vs shell", engine_a=a, engine_b=b, workload={"depth": 0, "output_tokens": 8}
    )
    experiment = experiment_advance(experiment=experiment, max_slots=2)
    slots = list(Slot.objects.filter(experiment=experiment, run__isnull=False).order_by("order"))
    assert len(slots) == 2 and all(s.snapshot_b_id for s in slots), "the hand-run arm was not read"
    snap = slots[0].snapshot_b
    assert snap.data["launch"] == "hand-run" and snap.data["flags"]["origins"]["--port"].endswith("/cmdline")
    warnings = arm_difference(experiment=experiment)["warnings"]  # what the A/B page shows
    assert not [w for w in warnings if "has no configuration snapshot" in w], warnings
