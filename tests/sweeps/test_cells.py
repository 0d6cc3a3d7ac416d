"""Per-run figures (sparkops/benchmarks/cells.py) against a simulated engine at known rates."""

import pytest

from sparkops.benchmarks.cells import run_cell_figures
from sparkops.benchmarks.services import run_create, run_execute
from sparkops.benchmarks.spec import RunSpec

pytestmark = pytest.mark.django_db(transaction=True)

RATE, CAP = 500.0, 1200.0


def _run(engine, concurrency):
    spec = RunSpec(
        engine_name=engine.name,
        engine_kind=engine.kind,
        base_url=engine.base_url,
        depth=0,
        output_tokens=200,
        reps=3,
        concurrency=concurrency,
    )
    return run_execute(run=run_create(engine=engine, spec=spec))


def test_one_stream_reads_its_own_rate_and_prefill_is_prompt_over_ttft(sim, make_engine):
    eng = sim("vllm", rate=RATE, ttft=0.02, prefill_rate=1e9)
    run = _run(make_engine(eng.url), 1)
    assert run.status == "done", run.reason
    f = run_cell_figures(run)
    assert f["aggregate_decode_tokens_per_s"] == pytest.approx(RATE, rel=0.02)
    assert f["per_stream_decode_tokens_per_s"] == pytest.approx(RATE, rel=0.02)
    reps = list(run.repetitions.all())
    prompt = reps[0].prompt_tokens
    assert f["aggregate_prefill_tokens_per_s"] == pytest.approx(prompt / (f["ttft_ms"] / 1000), rel=0.2)
    assert f["requests"] == 3 and f["ok"] == 3 and f["errors"] == {} and f["error_share"] == 0.0
    assert f["ttft_p90_ms"] is None  # three requests: no p90 (stats.PERCENTILE_MIN_N)
    assert f["aggregate_decode_tokens_per_s_sd"] is not None and len(f["rounds"]) == 3


def test_streams_share_the_cap(sim, make_engine):
    eng = sim("vllm", rate=RATE, aggregate_cap=CAP)
    run = _run(make_engine(eng.url), 4)
    assert run.status == "done", run.reason
    f = run_cell_figures(run)
    assert f["aggregate_decode_tokens_per_s"] == pytest.approx(CAP, rel=0.02)
    assert f["per_stream_decode_tokens_per_s"] == pytest.approx(CAP / 4, rel=0.02)
    assert f["ttft_p90_ms"] is not None  # twelve requests


def test_failed_requests_count_by_bucket(scripted, make_engine):
    server = scripted(lambda body: (429, "application/json", [b'{"error":"busy"}'], False))
    eng = make_engine(server.url)
    run = _run(eng, 2)
    f = run_cell_figures(run)
    assert f["errors"] == {"overload": 6} and f["error_share"] == 1.0
    assert f["aggregate_decode_tokens_per_s"] is None and f["ttft_ms"] is None
