"""Sweeps end to end against simulated engines at known rates (real sockets, real database)."""

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from sparkops.benchmarks.models import Run, Sweep
from sparkops.benchmarks.spec import RunSpec
from sparkops.benchmarks.sweep import SweepError, sweep_create, sweep_execute
from sparkops.benchmarks.sweep_export import sweep_csv, sweep_markdown

pytestmark = pytest.mark.django_db(transaction=True)

R, CAP = 100.0, 250.0  # each stream 100 tok/s, 250 tok/s shared: min(n·r, cap) = 100, 200, 250


def _spec(engine, **kw):
    kw.setdefault("depth", 0)
    kw.setdefault("output_tokens", 120)
    kw.setdefault("reps", 3)
    return RunSpec(engine_name=engine.name, engine_kind=engine.kind, base_url=engine.base_url, **kw)


def _sweep_json(*args):
    from io import StringIO

    out = StringIO()
    call_command("bench", "sweep", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_concurrency_sweep_reads_min_of_n_r_and_cap(sim, make_engine):
    eng = sim("vllm", rate=R, aggregate_cap=CAP)
    make_engine(eng.url, name="capped")
    data = _sweep_json("--engine", "capped", "--concurrency", "1,2,4", "--output-tokens", "80", "--reps", "3")
    assert data["status"] == "done" and data["stop_reason"] == "" and data["not_run"] == []
    assert [c["value"] for c in data["cells"]] == [1, 2, 4]
    for cell in data["cells"]:
        n = cell["value"]
        expected = min(n * R, CAP)
        # within 5 %: at load average 11 the paced rate read 2 % low; 100, 200 and 250 stay apart
        assert cell["aggregate_decode_tokens_per_s"] == pytest.approx(expected, rel=0.05), cell
        assert cell["per_stream_decode_tokens_per_s"] == pytest.approx(expected / n, rel=0.05), cell
        assert cell["ttft_ms"] > 0 and cell["errors"] == {} and cell["requests"] == 3 * n
    sweep = Sweep.objects.get(pk=data["sweep"])
    cells = list(sweep.cells.order_by("sweep_value"))
    assert [r.sweep_value for r in cells] == [1, 2, 4]
    assert all(r.trigger == "sweep" and r.status == "done" for r in cells)
    assert all(r.config["warmup"]["ok"] for r in cells)  # each cell kept the per-run methodology
    assert len({r.params_hash for r in cells}) == 3  # concurrency is part of each run's hash


def test_depth_sweep_ttft_grows_with_the_prompt(sim, make_engine):
    # Each cell's TTFT is the median of three salted (uncached) requests, and the prompt's prefill
    # (128 ms and 512 ms) stands well above a loaded box's scheduling delay: with one request a cell
    # at 20,000 tok/s, one 94 ms stall on the empty prompt's request put it above the 1,024-token
    # cell (CI, PostgreSQL half).
    eng = sim("vllm", rate=2000.0, ttft=0.005, prefill_rate=8000.0)
    make_engine(eng.url, name="deep")
    data = _sweep_json("--engine", "deep", "--depth", "0,1024,4096", "--output-tokens", "32", "--reps", "3")
    assert data["status"] == "done", data
    ttft = [c["ttft_ms"] for c in data["cells"]]
    assert ttft[0] < ttft[1] < ttft[2]
    # a stall only adds time: no cell reads less than its prompt's prefill at 8,000 tok/s
    assert ttft[1] >= 1024 / 8000 * 1000 * 0.95 and ttft[2] >= 4096 / 8000 * 1000 * 0.95, ttft
    # 4,096 prompt tokens at 8,000 tok/s of prefill: about 512 ms more than the empty prompt
    assert ttft[2] - ttft[0] == pytest.approx(4096 / 8000 * 1000, rel=0.15)
    assert data["fixed"]["concurrency"] == 1 and "depth" not in data["fixed"]


def test_depth_with_concurrency_needs_force_and_creates_nothing(sim, make_engine):
    eng = sim("vllm")
    make_engine(eng.url, name="e1")
    with pytest.raises(CommandError, match="needs force"):
        call_command("bench", "sweep", "--engine", "e1", "--depth", "0,4096", "--at-concurrency", "4")
    with pytest.raises(CommandError, match="needs force"):
        call_command("bench", "sweep", "--engine", "e1", "--concurrency", "1,2", "--at-depth", "1024")
    assert Sweep.objects.count() == 0 and Run.objects.count() == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--concurrency", "4,2"], "rise strictly"),
        (["--concurrency", "1,two"], "not a whole number"),
        (["--concurrency", "0,1"], "concurrency values must be 1"),
        (["--depth", "0,4096", "--reps", "2"], "odd"),
        (["--concurrency", "1,2", "--output-tokens", "1"], "output tokens"),
        (["--concurrency", ","], "give the concurrency values"),
        (["--concurrency", "1,2", "--timeout", "0.5"], "--timeout"),
    ],
)
def test_bad_input_is_refused_with_a_reason(make_engine, args, message):
    make_engine("http://127.0.0.1:9", name="e2")
    with pytest.raises(CommandError, match=message):
        call_command("bench", "sweep", "--engine", "e2", *args)
    assert Sweep.objects.count() == 0


def test_unknown_engine(db):
    with pytest.raises(CommandError, match="no engine named 'nope'"):
        call_command("bench", "sweep", "--engine", "nope", "--concurrency", "1")


def test_saturation_stops_the_sweep_and_says_why(sim, make_engine):
    # llama.cpp with 2 slots: from 4 streams on, half of them queue for a whole generation.
    eng = sim("llamacpp", rate=1000.0, slots=2, ttft=0.005)
    engine = make_engine(eng.url, kind="llamacpp", name="two-slots")
    sweep = sweep_create(engine=engine, axis="concurrency", values=[1, 2, 4, 8], spec=_spec(engine, output_tokens=64))
    sweep = sweep_execute(sweep=sweep)
    assert sweep.status == "done"
    assert [r["value"] for r in sweep.table] == [1, 2, 4]  # 8 was never sent
    assert sweep.stop_reason.startswith("saturated at concurrency 4: aggregate decode")
    assert "TTFT median" in sweep.stop_reason
    assert not Run.objects.filter(sweep=sweep, sweep_value=8).exists()
    md = sweep_markdown(sweep)
    assert "Stopped early: saturated at concurrency 4" in md


def test_errors_past_the_threshold_stop_the_sweep(scripted, make_engine):
    from tests.benchmarks.servers import delta_chunk, finish_chunk, usage_chunk

    calls = {"n": 0}

    def script(body):  # concurrency 1 (warm-up + 3) and the next warm-up answer; after that, every other is 429
        calls["n"] += 1
        if calls["n"] > 5 and calls["n"] % 2 == 0:
            return 429, "application/json", [b'{"error":"busy"}'], False
        parts = [delta_chunk(content="a"), delta_chunk(content="b"), finish_chunk(), usage_chunk(2, prompt=20)]
        return 200, "text/event-stream", parts, False

    engine = make_engine(scripted(script).url, name="flaky")
    sweep = sweep_create(
        engine=engine, axis="concurrency", values=[1, 2, 4], spec=_spec(engine, output_tokens=2), error_threshold=0.2
    )
    sweep = sweep_execute(sweep=sweep)
    assert [r["value"] for r in sweep.table] == [1, 2]
    assert sweep.stop_reason.startswith("errors passed 20 % at concurrency 2:")
    assert "overload ×" in sweep.stop_reason
    assert sweep.table[1]["errors"]["overload"] >= 2


def test_exports_keep_the_field_report_shape(sim, make_engine):
    eng = sim("vllm", rate=R, aggregate_cap=CAP)
    engine = make_engine(eng.url, name="exp")
    sweep = sweep_execute(
        sweep=sweep_create(engine=engine, axis="concurrency", values=[1, 2], spec=_spec(engine, output_tokens=40))
    )
    md = sweep_markdown(sweep).splitlines()
    assert md[1] == (
        "| concurrency | aggregate decode tok/s (± sd) | per-stream tok/s | aggregate prefill tok/s "
        "| time to first response |"
    )
    assert md[3].startswith("| 1 | ") and " ± " in md[3] and md[4].startswith("| 2 | ")
    agg = float(md[4].split("|")[2].split("±")[0].replace(",", ""))
    assert agg == pytest.approx(sweep.table[1]["aggregate_decode_tokens_per_s"], abs=0.06)
    csv = sweep_csv(sweep).splitlines()
    assert csv[0].startswith("concurrency,run,status,reason,tainted,aggregate_decode_tokens_per_s,")
    assert len(csv) == 3 and csv[1].startswith(f"1,{sweep.table[0]['run']},done,")


def test_the_hash_covers_the_fixed_parameters_not_the_axis_value(make_engine):
    engine = make_engine("http://127.0.0.1:9", name="h")
    a = sweep_create(engine=engine, axis="concurrency", values=[1, 2], spec=_spec(engine))
    b = sweep_create(engine=engine, axis="concurrency", values=[1, 2], spec=_spec(engine, concurrency=7))
    c = sweep_create(engine=engine, axis="concurrency", values=[1, 2], spec=_spec(engine, output_tokens=99))
    assert a.params_hash == b.params_hash != c.params_hash
    with pytest.raises(SweepError, match="error threshold"):
        sweep_create(engine=engine, axis="concurrency", values=[1], spec=_spec(engine), error_threshold=2)


def test_a_sweep_whose_worker_died_is_failed_with_the_reason_and_keeps_its_cells(make_engine):
    from datetime import timedelta

    from django.utils import timezone

    from sparkops.benchmarks.sweep import sweeps_fail_stale
    from sparkops.benchmarks.tasks import bench_sweep_stale

    engine = make_engine("http://127.0.0.1:9", name="gone")
    long_ago = timezone.now() - timedelta(hours=1)
    dead = sweep_create(engine=engine, axis="concurrency", values=[1, 2], spec=_spec(engine))
    busy = sweep_create(engine=engine, axis="concurrency", values=[1, 2], spec=_spec(engine))
    Sweep.objects.filter(pk__in=[dead.pk, busy.pk]).update(status="running", started_at=long_ago)
    Run.objects.create(engine=engine, params_hash="x", status="done", sweep=dead, sweep_value=1, finished_at=long_ago)
    Run.objects.create(engine=engine, params_hash="x", status="running", sweep=busy, sweep_value=1)
    bench_sweep_stale()  # beat's task: stale runs, then stale sweeps
    dead.refresh_from_db()
    busy.refresh_from_db()
    assert dead.status == "failed" and "worker stopped mid-sweep" in dead.reason
    assert dead.cells.get().status == "done"
    assert busy.status == "running"  # its cell is still running (the run's own budget decides that one)
    assert sweeps_fail_stale() == 0  # claimed once


def test_a_cell_past_the_window_is_refused_and_stops_the_sweep_with_its_reason(sim, make_engine):
    eng = sim("vllm", max_model_len=4096)
    make_engine(eng.url, name="short", window=4096)
    from io import StringIO

    out = StringIO()
    call_command("bench", "sweep", "--engine", "short", "--depth", "0,1024,8192", "--output-tokens", "16",
                 "--reps", "1", stdout=out)  # fmt: skip
    text = out.getvalue()
    assert "depth 0: done" in text and "depth 1,024: done" in text  # each cell printed as it lands
    sweep = Sweep.objects.get()
    assert [r["value"] for r in sweep.table] == [0, 1024, 8192]
    assert sweep.table[2]["status"] == "refused"
    assert sweep.stop_reason.startswith("depth 8,192 refused: prompt 8192 + output 16")
    assert "does not fit the window of 4096" in sweep.stop_reason
    assert sweep.status == "done"  # two cells measured; the third says why not
