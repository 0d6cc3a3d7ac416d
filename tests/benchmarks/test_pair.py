"""Co-residency: each engine alone, then both generating at once."""

import pytest

from sparkops.benchmarks.models import Profile
from sparkops.benchmarks.pair import pair_create, pair_execute

pytestmark = pytest.mark.django_db(transaction=True)


def test_pair_runs_solo_then_both(sim, make_engine):
    fast, slow = sim("vllm", rate=800.0), sim("llamacpp", rate=200.0, slots=2)
    a = Profile.objects.create(
        name="fast", engine=make_engine(fast.url, name="fast"), depth=0, output_tokens=400, reps=3
    )
    b = Profile.objects.create(
        name="slow", engine=make_engine(slow.url, kind="llamacpp", name="slow"), depth=0, output_tokens=40, reps=1
    )
    pair = pair_execute(pair=pair_create(profile_a=a, profile_b=b))
    assert pair.status == "done", pair.reason
    phases = sorted((r.engine.name, r.phase) for r in pair.runs.all())
    assert phases == [("fast", "both"), ("fast", "solo"), ("slow", "both"), ("slow", "solo")]
    rows = {row["engine"]: row for row in pair.table["rows"]}
    # 400 tokens span 0.5 s: a first token late by a loaded machine's scheduling, which the simulator's
    # schedule then catches up on, moves the rate by a tenth only past a 45 ms stall (80 tokens, 0.1 s, read
    # 898 once under a profiler's load: an 11 ms stall)
    assert rows["fast"]["solo_decode"] == pytest.approx(800, rel=0.1)
    # the slow engine's 40 tokens span 0.2 s: a first token late by a loaded machine's scheduling
    # (the simulator then catches up on its schedule) moves its rate by up to a fifth
    assert rows["slow"]["both_decode"] == pytest.approx(200, rel=0.25)
    assert pair.table["combined_both_decode"] == pytest.approx(
        rows["fast"]["both_decode"] + rows["slow"]["both_decode"]
    )
    both_slow = pair.runs.get(engine__name="slow", phase="both")
    assert not both_slow.tainted  # the partner generating is the point of this phase, not a taint


def test_pair_needs_two_engines(fleet):
    a = Profile.objects.create(name="a", engine=fleet["vllm"])
    b = Profile.objects.create(name="b", engine=fleet["vllm"])
    with pytest.raises(ValueError):
        pair_create(profile_a=a, profile_b=b)
