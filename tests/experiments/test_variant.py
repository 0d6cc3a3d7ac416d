"""Verify the variant on a simulated box: the arms' configuration difference against the flags the
experiment names, and repetitions marked invalid when an arm's unit changes mid-experiment."""

import pytest

from sparkops.experiments.create import experiment_create
from sparkops.experiments.models import Slot
from sparkops.experiments.runner import experiment_advance

pytestmark = pytest.mark.django_db(transaction=True)
WORKLOAD = {"depth": 0, "output_tokens": 12}
SEQS = '[Service]\nEnvironment="VLLM_EXTRA_ARGS=--max-num-seqs {n}"\n'


def _set_seqs(sim, name, n):
    """What an operator does: a drop-in that sorts last, then a restart."""
    sim.dropin(name, "90-seqs.conf", SEQS.format(n=n))
    sim.restart(name)
    sim.wait_ready(name)


def test_a_mid_experiment_drop_in_marks_that_arms_later_repetitions_invalid(ab_box):
    sim, engines = ab_box
    _set_seqs(sim, "arm-b", 64)  # the variant: B serves with --max-num-seqs 64, A with the unit's 128
    experiment = experiment_create(
        name="seqs", engine_a=engines["arm-a"], engine_b=engines["arm-b"], workload=WORKLOAD, flags=["--max-num-seqs"]
    )
    experiment = experiment_advance(experiment=experiment, max_slots=2)  # A, B
    assert experiment.status == "waiting"
    _set_seqs(sim, "arm-a", 32)  # the drop-in that overrode arm A half-way
    experiment = experiment_advance(experiment=experiment)
    slots = list(Slot.objects.filter(experiment=experiment).order_by("order"))
    assert [s.arm for s in slots] == ["A", "B", "A", "B", "A", "B"]
    assert [s.valid for s in slots] == [True, True, False, True, False, True]
    assert all(s.snapshot_a_id and s.snapshot_b_id for s in slots)  # both arms read before every repetition
    assert "--max-num-seqs 128 → 32" in slots[2].invalid_reason and "90-seqs.conf" in slots[2].invalid_reason
    v = experiment.verdict
    assert v["arms"]["A"]["reps_counted"] == 1 and v["arms"]["A"]["reps_invalid"] == 2
    assert experiment.status == "failed" and "fewer than 3 valid" in experiment.reason
    # The difference the page shows is the baseline one: exactly the flag named, no warning.
    diff = v["difference"]
    assert [(d["name"], d["a"], d["b"]) for d in diff["lines"]] == [("--max-num-seqs", "128", "64")]
    assert diff["exact"] and diff["warnings"] == []
    assert diff["ignored"] == ["--port", "ExecStartPost="]  # each unit's own port: the setup, not the variant


def test_arms_that_differ_by_other_flags_than_named_get_a_warning(ab_box):
    sim, engines = ab_box
    _set_seqs(sim, "arm-b", 64)
    experiment = experiment_create(
        name="window",
        engine_a=engines["arm-a"],
        engine_b=engines["arm-b"],
        workload=WORKLOAD,
        flags=["--max-model-len"],
    )
    experiment = experiment_advance(experiment=experiment)
    assert experiment.status == "done", experiment.reason
    assert all(s["valid"] for s in experiment.verdict["slots"])
    diff = experiment.verdict["difference"]
    assert not diff["exact"]
    assert diff["warnings"] == [
        "The arms do not differ by exactly the flags this experiment names (--max-model-len): "
        "they also differ in --max-num-seqs; they do not differ in --max-model-len."
    ]


def test_restart_mode_waits_for_the_operator_between_slots_and_catches_a_forgotten_restart(ab_box):
    sim, engines = ab_box
    engine = engines["arm-a"]
    experiment = experiment_create(
        name="one unit", engine_a=engine, engine_b=engine, workload=WORKLOAD, flags=["--max-num-seqs"]
    )
    assert experiment.mode == "restart"
    experiment = experiment_advance(experiment=experiment)
    assert experiment.status == "waiting"
    assert experiment.reason.startswith("Restart arm-a into arm B's configuration (--max-num-seqs)")
    seqs = {"A": None, "B": 64}  # A: the unit as it is (128); B: a drop-in with 64
    for order in range(2, 7):
        arm = "AB"[(order - 1) % 2]
        if order != 5:  # before the fifth slot the operator forgets to restart back into A
            sim.dropin("arm-a", "90-seqs.conf", SEQS.format(n=seqs[arm]) if seqs[arm] else None)
            sim.restart("arm-a")
            sim.wait_ready("arm-a")
        experiment = experiment_advance(experiment=experiment)
        assert Slot.objects.filter(experiment=experiment, run__isnull=False).count() == order
    slots = list(Slot.objects.filter(experiment=experiment).order_by("order"))
    assert [s.valid for s in slots] == [True, True, True, True, False, True]
    assert "--max-num-seqs 128 → 64" in slots[4].invalid_reason
    diff = experiment.verdict["difference"]
    assert [(d["name"], d["a"], d["b"]) for d in diff["lines"]] == [("--max-num-seqs", "128", "64")]
    assert diff["exact"] and diff["ignored"] == []
    assert experiment.status == "failed"  # two valid repetitions of A: no verdict
