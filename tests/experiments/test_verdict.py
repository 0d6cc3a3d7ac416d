"""A/B against simulated engines at known rates, over real HTTP: the verdict and its noise band."""

import pytest

from sparkops.experiments.create import experiment_create
from sparkops.experiments.runner import experiment_advance

pytestmark = pytest.mark.django_db(transaction=True)
WORKLOAD = {"depth": 0, "output_tokens": 48}


def _run(sim, make_engine, rate_a, rate_b, reps=3):
    a = make_engine(sim("vllm", rate=rate_a, ttft=0.01).url, name="a")
    b = make_engine(sim("vllm", rate=rate_b, ttft=0.01).url, name="b")
    experiment = experiment_create(name="rate", engine_a=a, engine_b=b, workload=WORKLOAD, reps=reps)
    return experiment_advance(experiment=experiment)


def test_50_vs_55_says_b_faster_with_an_interval_that_holds_1_10(sim, make_engine):
    experiment = _run(sim, make_engine, 50.0, 55.0)
    assert experiment.status == "done", experiment.reason
    v = experiment.verdict
    d = v["figures"]["decode_tokens_per_s"]
    assert d["verdict"] == "faster"
    assert d["ci_low"] <= 1.10 <= d["ci_high"]
    assert v["arms"]["A"]["per_stream_decode_tokens_per_s"] == pytest.approx(50, rel=0.03)
    assert v["arms"]["B"]["aggregate_decode_tokens_per_s"] == pytest.approx(55, rel=0.03)


def test_50_vs_50_says_no_difference(sim, make_engine):
    experiment = _run(sim, make_engine, 50.0, 50.0)
    v = experiment.verdict
    assert v["figures"]["decode_tokens_per_s"]["verdict"] == "no difference within noise"


def test_a_quality_probe_per_arm_shows_a_faster_arm_that_answers_worse(sim, make_engine):
    a = make_engine(sim("vllm", rate=50.0, ttft=0.01).url, name="a")
    b = make_engine(sim("vllm", rate=55.0, ttft=0.01, tool_calls="strings").url, name="b")
    experiment = experiment_create(
        name="faster, worse", engine_a=a, engine_b=b, workload={"depth": 0, "output_tokens": 12}, probe="tool"
    )
    v = experiment_advance(experiment=experiment).verdict
    qa, qb = v["arms"]["A"]["quality"]["probe"], v["arms"]["B"]["quality"]["probe"]
    assert (qa["kind"], qa["status"], qa["passed"]) == ("tool", "done", True)
    assert (qb["kind"], qb["status"], qb["passed"]) == ("tool", "done", False)
    assert experiment.probe_run_b.engine == b and experiment.probe_run_b.result["coerced_valid"] == 3
