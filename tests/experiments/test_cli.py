"""`sparkops bench ab`: JSON per arm and per figure; bad input is refused and creates nothing."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from sparkops.benchmarks.models import Run
from sparkops.experiments.models import Experiment

pytestmark = pytest.mark.django_db(transaction=True)


def test_bench_ab_json(sim, make_engine):
    make_engine(sim("vllm", rate=50.0, ttft=0.01).url, name="ctl")
    make_engine(sim("vllm", rate=55.0, ttft=0.01).url, name="var")
    out = StringIO()
    call_command(
        "bench", "ab", "--a", "ctl", "--b", "var", "--output-tokens", "48", "--depth", "0", "--json", stdout=out
    )
    data = json.loads(out.getvalue())
    assert data["status"] == "done"
    for arm, rate in (("A", 50), ("B", 55)):
        figures = data["arms"][arm]
        assert figures["aggregate_decode_tokens_per_s"] == pytest.approx(rate, rel=0.03)
        assert figures["per_stream_decode_tokens_per_s"] == pytest.approx(rate, rel=0.03)
        assert figures["ttft_ms"] > 0
    assert data["verdict"]["decode_tokens_per_s"] == "faster"
    assert data["ratio"]["decode_tokens_per_s"] == pytest.approx(1.10, rel=0.02)
    assert (
        data["ci_low"]["decode_tokens_per_s"]
        <= data["ratio"]["decode_tokens_per_s"]
        <= data["ci_high"]["decode_tokens_per_s"]
    )
    assert data["verdict"]["total_ms"] == "faster"  # B's total time is lower: faster, though the ratio is < 1
    assert data["ratio"]["total_ms"] < 1
    assert [s["arm"] for s in data["slots"]] == ["A", "B", "A", "B", "A", "B"]
    assert Run.objects.filter(trigger="cli").count() == 6


@pytest.mark.parametrize(
    "args, message",
    [
        (["--a", "ctl", "--b", "nope"], "--b: no engine named 'nope'"),
        (["--a", "ctl", "--b", "var", "--reps", "2"], "at least three"),
        (["--a", "ctl", "--b", "ctl"], "same engine"),
        (["--a", "ctl", "--b", "var", "--output-tokens", "1"], "--output-tokens: Pin at least 2 output tokens"),
        (["--a", "ctl", "--b", "var", "--flags", "speculative"], "is not a launch flag"),
        (
            ["--a", "ctl", "--b", "var", "--timeout", "0.5"],
            "--timeout: Ensure this value is greater than or equal to 1",
        ),
    ],
)
def test_bench_ab_refuses_bad_input(make_engine, args, message):
    make_engine("http://127.0.0.1:9", name="ctl")
    make_engine("http://127.0.0.1:9", name="var")
    with pytest.raises(CommandError, match=message):
        call_command("bench", "ab", *args, stdout=StringIO())
    assert Experiment.objects.count() == 0 and Run.objects.count() == 0


def test_bench_ab_text(sim, make_engine):
    make_engine(sim("vllm", rate=400.0, ttft=0.01).url, name="ctl")
    make_engine(sim("vllm", rate=200.0, ttft=0.01).url, name="var")
    out = StringIO()
    call_command("bench", "ab", "--a", "ctl", "--b", "var", "--output-tokens", "16", "--depth", "0", stdout=out)
    text = out.getvalue()
    assert "arm A ctl" in text and "arm B var" in text
    assert [line.split()[1] for line in text.splitlines() if line.strip().startswith("#")] == ["A", "B"] * 3
    assert "decode tok/s" in text and "slower" in text
    assert "WARNING: Arm A (ctl) has no configuration snapshot" in text
