"""Rate mode: requests at a fixed or Poisson arrival rate for a duration, with goodput (real sockets, real DB)."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from sparkops.benchmarks.models import Run
from sparkops.benchmarks.rate import arrival_offsets
from tests.boxes import worker_reported

pytestmark = pytest.mark.django_db(transaction=True)


def _rate_json(*args):
    out = StringIO()
    call_command("bench", "rate", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_fixed_rate_sends_on_schedule_and_every_request_meets_a_loose_slo(sim, make_engine):
    sim_engine = sim("vllm", rate=400.0, ttft=0.005)  # 20 tokens: TPOT 2.5 ms
    make_engine(sim_engine.url, name="r1")
    data = _rate_json(
        "--engine", "r1", "--rate", "10", "--duration", "1", "--output-tokens", "20",
        "--slo-ttft-ms", "500", "--slo-tpot-ms", "10",
    )  # fmt: skip
    r = data["rate"]
    assert data["status"] == "done" and r["sent"] == 10 and r["ok"] == 10
    assert r["goodput_share"] == 1.0 and r["met_slo"] == 10 and r["goodput_rps"] == pytest.approx(10.0)
    assert r["tpot_ms"] == pytest.approx(2.5, rel=0.1)
    run = Run.objects.get(pk=data["run"])
    starts = [rep.started_at for rep in run.repetitions.order_by("index")]
    offsets = [(t - starts[0]).total_seconds() for t in starts]
    # one every 100 ms on an absolute schedule (a late send does not push the next ones), not back to back
    assert all(abs(off - 0.1 * i) < 0.06 for i, off in enumerate(offsets)), offsets
    assert run.trigger == "rate" and run.config["warmup"]["ok"] is True


def test_a_tight_inter_token_slo_gives_no_goodput(sim, make_engine):
    sim_engine = sim("vllm", rate=100.0, ttft=0.005)  # TPOT 10 ms
    make_engine(sim_engine.url, name="r2")
    data = _rate_json(
        "--engine", "r2", "--rate", "8", "--duration", "0.5", "--output-tokens", "12",
        "--slo-ttft-ms", "500", "--slo-tpot-ms", "5",
    )  # fmt: skip
    assert data["rate"]["sent"] == 4 and data["rate"]["ok"] == 4
    assert data["rate"]["goodput_share"] == 0.0 and data["rate"]["tpot_ms"] == pytest.approx(10.0, rel=0.1)


def test_overlap_against_a_shared_cap_meets_the_slo_only_in_part(sim, make_engine):
    # 40 tokens at 200 tok/s each (0.2 s), 20 req/s: about 4 overlap; a 400 tok/s cap halves each stream's rate
    # while they do, so TPOT goes from 5 ms to about 10 ms — past a 7 ms SLO for the overlapped ones.
    sim_engine = sim("vllm", rate=200.0, aggregate_cap=400.0, ttft=0.005)
    make_engine(sim_engine.url, name="r3")
    data = _rate_json(
        "--engine", "r3", "--rate", "20", "--duration", "1", "--output-tokens", "40",
        "--slo-ttft-ms", "500", "--slo-tpot-ms", "7",
    )  # fmt: skip
    r = data["rate"]
    assert r["sent"] == 20 and r["ok"] == 20
    assert 0.0 <= r["goodput_share"] < 0.5


def test_poisson_arrivals_are_seeded_and_average_the_rate():
    a = arrival_offsets(rate=50, duration_s=20, arrival="poisson", seed=7)
    assert a == arrival_offsets(rate=50, duration_s=20, arrival="poisson", seed=7)
    assert a != arrival_offsets(rate=50, duration_s=20, arrival="poisson", seed=8)
    assert len(a) == pytest.approx(1000, rel=0.1) and a == sorted(a) and a[-1] < 20
    assert arrival_offsets(rate=4, duration_s=1, arrival="fixed") == [0.0, 0.25, 0.5, 0.75]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rate", "0"], "above 0"),
        (["--rate", "2", "--duration", "-1"], "duration"),
        (["--rate", "2", "--depth", "4096"], "needs force"),
        (["--rate", "2", "--slo-tpot-ms", "0"], "SLOs"),
        (["--rate", "2", "--timeout", "0.5"], "--timeout"),
    ],
)
def test_bad_input_is_refused_and_creates_nothing(make_engine, args, message):
    make_engine("http://127.0.0.1:9", name="r4")
    with pytest.raises(CommandError, match=message):
        call_command("bench", "rate", "--engine", "r4", *args)
    assert Run.objects.count() == 0


def _rate_form(engine, **kw):
    data = {
        "engine": engine.pk,
        "rate": 10,
        "duration_s": 0.5,
        "arrival": "fixed",
        "seed": 0,
        "slo_ttft_ms": 500,
        "slo_tpot_ms": 10,
        "depth": 0,
        "output_tokens": 16,
    }
    data.update(kw)
    return data


def test_rate_form_queues_a_run_and_its_page_shows_goodput(operator_client, sim, make_engine):
    from sparkops.benchmarks.rate import rate_execute

    sim_engine = sim("vllm", rate=400.0, ttft=0.005)
    engine = make_engine(sim_engine.url, name="r5")
    worker_reported(engine.host)
    response = operator_client.post("/bench/rate/new/", _rate_form(engine))
    run = Run.objects.get()
    assert response["Location"] == f"/bench/runs/{run.pk}/"
    assert run.status == "queued" and run.trigger == "rate" and run.total_reps == 5
    assert run.config["rate"]["slo_tpot_ms"] == 10
    rate_execute(run=run)  # what the queued task (bench.rate_execute) calls on the engine's box
    page = operator_client.get(f"/bench/runs/{run.pk}/").content.decode()
    assert 'id="rate-goodput">100 %' in page and "5 of 5 requests met both" in page


def test_rate_form_refuses_depth_without_force(operator_client, make_engine):
    engine = make_engine("http://127.0.0.1:9", name="r6")
    response = operator_client.post("/bench/rate/new/", _rate_form(engine, depth=2048))
    assert response.status_code == 200 and "needs force in rate mode" in response.content.decode()
    assert Run.objects.count() == 0
