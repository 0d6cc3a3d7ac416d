"""`sparkops probe run` and `sparkops probe list`: the scored result as JSON, bad input refused with a
message that names the flag and nothing saved."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from sparkops.probes.models import ProbeProfile, ProbeRun

pytestmark = pytest.mark.django_db


def cli(*args):
    out = StringIO()
    call_command("probe", *args, stdout=out)
    return out.getvalue()


def test_probe_run_needle_json(sim, make_engine):
    eng = sim("vllm", needle_recall="10:1,90:0")
    make_engine(eng.url, name="sim-vllm")
    out = json.loads(
        cli(
            "run",
            "--engine",
            "sim-vllm",
            "--kind",
            "needle",
            "--tokens",
            "1200",
            "--depths",
            "10,90",
            "--decoys",
            "1",
            "--reps",
            "3",
            "--json",
        )
    )
    assert out["status"] == "done" and out["kind"] == "needle" and out["passed"] is False
    (row,) = out["result"]["rows"]
    assert row["cells"]["10"]["verdict"] == "HIT" and row["cells"]["90"]["verdict"] == "MISS"
    assert len(out["cases"]) == 6 and {c["verdict"] for c in out["cases"]} == {"HIT", "MISS"}
    assert out["headline"] == "HIT MISS"


def test_probe_run_text_and_list(sim, make_engine):
    eng = sim("vllm")
    engine = make_engine(eng.url, name="sim-vllm")
    text = cli("run", "--engine", "sim-vllm", "--kind", "tool")
    assert "good" in text and "raw 3/3 valid, coerced 3/3" in text
    profile = ProbeProfile.objects.create(name="nightly-needle", engine=engine, kind="needle")
    rows = json.loads(cli("list", "--json"))
    assert rows[0]["profile"] == "nightly-needle" and rows[0]["last_run"] is None
    assert "nightly-needle" in cli("list")
    run = ProbeRun.objects.create(
        profile=profile, engine=engine, kind="needle", params_hash=profile.params_hash, headline="HIT HIT"
    )
    ProbeRun.objects.create(
        profile=profile, engine=engine, kind="needle", params_hash="0" * 16
    )  # newer, other parameters
    (row,) = json.loads(cli("list", "--json"))
    assert row["last_run"] == {  # the newest run of the profile's current parameters
        "id": run.pk,
        "status": "queued",
        "passed": None,
        "headline": "HIT HIT",
        "at": run.created_at.isoformat(),
    }
    assert f"run {run.pk} queued: HIT HIT" in cli("list")


@pytest.mark.parametrize(
    "args,message",
    [
        (["--kind", "needle", "--reps", "2"], "--reps must be odd"),
        (["--kind", "needle", "--depths", "10,500"], "between 0 and 100"),
        (["--kind", "needle", "--decoys", "40"], "--decoys must be between 0 and 8"),
        (["--kind", "soak", "--tokens", "10"], "--tokens must be between 64"),
        (["--kind", "needle", "--timeout", "0"], "--timeout must be between 1 and 86,400 s"),
        (["--kind", "needle", "--timeout", "-5"], "--timeout must be between 1 and 86,400 s"),
        (["--kind", "needle", "--reps", "x"], "argument --reps: 'x' is not a whole number"),
        ([], "--kind is required"),
    ],
)
def test_bad_input_is_refused_and_saves_nothing(sim, make_engine, args, message):
    make_engine(sim("vllm").url, name="sim-vllm")
    with pytest.raises((CommandError, SystemExit)) as err:
        cli("run", "--engine", "sim-vllm", *args)
    if isinstance(err.value, CommandError):
        assert message in str(err.value)
    assert ProbeRun.objects.count() == 0


def test_unknown_engine(db):
    with pytest.raises(CommandError, match="no engine named 'nope'"):
        cli("run", "--engine", "nope", "--kind", "needle")


def test_probe_run_needle_text_shows_the_table_with_its_control(sim, make_engine):
    make_engine(sim("vllm").url, name="sim-vllm")
    text = cli("run", "--engine", "sim-vllm", "--kind", "needle", "--tokens", "800", "--depths", "50", "--control")
    assert "HIT HIT" not in text.splitlines()[1]  # one depth: the headline is one verdict
    rows = [line for line in text.splitlines() if "50%: HIT 3/3" in line]
    assert len(rows) == 2 and "lighthouse" in rows[0] and "orchard (control)" in rows[1]


def test_probe_run_a_saved_profile(sim, make_engine):
    engine = make_engine(sim("vllm", max_model_len=2048).url, name="sim-vllm", window=2048)
    ProbeProfile.objects.create(name="window", engine=engine, kind="contract")
    text = cli("run", "--profile", "window")
    assert "prompt alone       rejected: This model's maximum context length is 2048" in text
    assert "failed requests" not in text  # the 400 is the contract's reading, not a failure
    (run,) = ProbeRun.objects.all()
    assert run.profile.name == "window" and run.trigger == "cli"
    with pytest.raises(CommandError, match="no probe profile named 'nope'"):
        cli("run", "--profile", "nope")
