"""Sweep pages: start from the form, bad input, the table, exports, attach to the change log."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from sparkops.benchmarks.models import Run, Sweep
from sparkops.benchmarks.spec import RunSpec
from sparkops.benchmarks.sweep import sweep_create, sweep_execute
from sparkops.changelog.models import Entry, EvidenceLink
from sparkops.changelog.services import entry_create
from tests.boxes import worker_reported


def _form(engine, **kw):
    data = {
        "engine": engine.pk,
        "axis": "concurrency",
        "values": "1,2,4",
        "depth": 0,
        "concurrency": 1,
        "output_tokens": 32,
        "reps": 3,
        "mode": "cold",
        "error_threshold": 0.2,
    }
    data.update(kw)
    return data


@pytest.mark.django_db
def test_operator_starts_a_sweep_from_the_form(operator_client, make_engine):
    engine = make_engine("http://127.0.0.1:9", name="e")
    worker_reported(engine.host)
    response = operator_client.post("/bench/sweeps/new/", _form(engine))
    sweep = Sweep.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/bench/sweeps/{sweep.pk}/"
    assert sweep.values == [1, 2, 4] and sweep.axis == "concurrency" and sweep.status == "queued"
    assert sweep.base["output_tokens"] == 32 and sweep.created_by.username == "otto"
    page = operator_client.get(f"/bench/sweeps/{sweep.pk}/").content.decode()
    assert page.count('data-state="waiting"') == 3 and 'data-live="1"' in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    "change, message",
    [
        ({"values": "4,2,1"}, "must rise strictly"),
        ({"values": "1,x"}, "not a whole number"),
        ({"axis": "depth", "values": "0,4096", "concurrency": 4}, "needs force"),
        ({"reps": 2}, "odd"),
    ],
)
def test_bad_input_re_renders_with_the_reason_and_creates_nothing(operator_client, make_engine, change, message):
    engine = make_engine("http://127.0.0.1:9", name="e")
    response = operator_client.post("/bench/sweeps/new/", _form(engine, **change))
    assert response.status_code == 200 and message in response.content.decode()
    assert Sweep.objects.count() == 0


@pytest.mark.django_db
def test_viewers_read_but_do_not_start(viewer_client, make_engine):
    engine = make_engine("http://127.0.0.1:9", name="e")
    assert viewer_client.post("/bench/sweeps/new/", _form(engine)).status_code == 403
    assert Sweep.objects.count() == 0
    assert "New sweep" not in viewer_client.get("/bench/").content.decode()
    spec = RunSpec(engine_name="e", engine_kind="vllm", base_url=engine.base_url, depth=0)
    sweep = sweep_create(engine=engine, axis="concurrency", values=[1, 2], spec=spec)
    page = viewer_client.get(f"/bench/sweeps/{sweep.pk}/")
    assert page.status_code == 200 and "Run again" not in page.content.decode()
    assert viewer_client.get(f"/bench/sweeps/{sweep.pk}/export.json").status_code == 200
    assert viewer_client.post(f"/bench/sweeps/{sweep.pk}/attach/").status_code == 403
    assert viewer_client.post(f"/bench/sweeps/{sweep.pk}/again/").status_code == 403
    assert viewer_client.post("/bench/rate/new/", {"engine": engine.pk, "rate": 1}).status_code == 403
    assert Sweep.objects.count() == 1 and Run.objects.count() == 0


@pytest.fixture
def finished(sim, make_engine):
    eng = sim("vllm", rate=400.0, aggregate_cap=600.0)
    engine = make_engine(eng.url, name="sim-a")
    spec = RunSpec(
        engine_name=engine.name, engine_kind="vllm", base_url=engine.base_url, depth=0, output_tokens=24, reps=1
    )
    return sweep_execute(sweep=sweep_create(engine=engine, axis="concurrency", values=[1, 2], spec=spec))


@pytest.mark.django_db(transaction=True)
def test_table_chart_data_and_exports(operator_client, finished):
    sweep = finished
    page = operator_client.get(f"/bench/sweeps/{sweep.pk}/").content.decode()
    assert page.count('data-state="done"') == 2 and 'data-live="0"' in page
    assert f'href="/bench/runs/{sweep.table[0]["run"]}/"' in page
    cell_page = operator_client.get(f"/bench/runs/{sweep.table[1]['run']}/").content.decode()
    assert f'<a href="/bench/sweeps/{sweep.pk}/">sweep #{sweep.pk}</a>, cell 2' in cell_page
    md = operator_client.get(f"/bench/sweeps/{sweep.pk}/export.md")
    assert md["Content-Type"].startswith("text/markdown")
    assert "| concurrency | aggregate decode tok/s (± sd) |" in md.content.decode()
    csv = operator_client.get(f"/bench/sweeps/{sweep.pk}/export.csv").content.decode().splitlines()
    assert len(csv) == 3 and csv[0].startswith("concurrency,run,status")
    data = json.loads(operator_client.get(f"/bench/sweeps/{sweep.pk}/export.json").content)
    assert [c["value"] for c in data["cells"]] == [1, 2]
    assert data["cells"][1]["aggregate_decode_tokens_per_s"] == sweep.table[1]["aggregate_decode_tokens_per_s"]
    assert operator_client.get(f"/bench/sweeps/{sweep.pk}/export.xls").status_code == 404
    assert f"/bench/sweeps/{sweep.pk}/" in operator_client.get("/bench/").content.decode()


@pytest.mark.django_db(transaction=True)
def test_attach_adds_each_cells_run_as_evidence(operator_client, operator, finished):
    sweep = finished
    runs = [row["run"] for row in sweep.table]
    response = operator_client.post(f"/bench/sweeps/{sweep.pk}/attach/", {"entry": ""})
    assert response.status_code == 302
    entry = Entry.objects.get(kind="measurement")
    assert sorted(e.ref_id for e in entry.evidence.filter(kind="benchmark_run")) == sorted(runs)
    assert entry.evidence.count() == len(runs)  # run:ID only: the change log's Markdown round trip keeps them
    assert f"(/bench/sweeps/{sweep.pk}/)" in entry.body_md
    assert "| concurrency | aggregate decode" in entry.body_md and entry.engines.get() == sweep.engine
    # the entry page shows the evidence as run:ID links
    shown = operator_client.get(entry.get_absolute_url()).content.decode()
    assert all(f"/bench/runs/{pk}/" in shown for pk in runs)
    # the change log's Markdown export reads back: the entry and its run:ID evidence plan as already there
    from sparkops.changelog.export import export_markdown
    from sparkops.changelog.importer import plan_import

    text = export_markdown()
    assert all(f"Evidence: run:{pk}" in text for pk in runs)
    plan = plan_import(text)  # raises LogSyntaxError on anything it cannot read
    assert plan.existing == 1 and not plan.new_entries, plan.new_entries
    # attaching the same sweep again as a new entry says where it already is, and adds nothing
    again = operator_client.post(f"/bench/sweeps/{sweep.pk}/attach/", {"entry": ""}, follow=True)
    assert f"already in the change log as entry #{entry.pk}" in again.content.decode()
    assert Entry.objects.count() == 1

    # an entry still in its grace period takes the evidence; a locked one refuses and changes nothing
    open_entry = entry_create(
        author=operator, effective_at=timezone.now(), title="raised max-num-seqs", kind="decision"
    )
    operator_client.post(f"/bench/sweeps/{sweep.pk}/attach/", {"entry": open_entry.pk})
    assert sorted(open_entry.evidence.filter(kind="benchmark_run").values_list("ref_id", flat=True)) == sorted(runs)
    old = entry_create(author=operator, effective_at=timezone.now(), title="old claim", kind="claim")
    from django.db import connection

    with connection.cursor() as cur:  # lock it by moving its lock into the past (the trigger allows it while open)
        cur.execute(
            "UPDATE changelog_entry SET locked_at = %s WHERE id = %s", [timezone.now() - timedelta(hours=1), old.pk]
        )
    before = EvidenceLink.objects.count()
    refused = operator_client.post(f"/bench/sweeps/{sweep.pk}/attach/", {"entry": old.pk}, follow=True)
    assert "past its grace period" in refused.content.decode()
    assert EvidenceLink.objects.count() == before
    assert Run.objects.filter(sweep=sweep).count() == 2


@pytest.mark.django_db(transaction=True)
def test_run_again_queues_the_same_definition_under_the_same_hash(operator_client, finished):
    worker_reported(finished.engine.host)
    response = operator_client.post(f"/bench/sweeps/{finished.pk}/again/")
    again = Sweep.objects.exclude(pk=finished.pk).get()
    assert response["Location"] == f"/bench/sweeps/{again.pk}/"
    assert (again.params_hash, again.values, again.axis, again.base) == (
        finished.params_hash,
        finished.values,
        finished.axis,
        finished.base,
    )
    page = operator_client.get(f"/bench/sweeps/{again.pk}/").content.decode()
    assert f'href="/bench/sweeps/{finished.pk}/"' in page


@pytest.mark.django_db
def test_admin_lists_sweeps(admin_client_, make_engine):
    engine = make_engine("http://127.0.0.1:9", name="adm")
    spec = RunSpec(engine_name="adm", engine_kind="vllm", base_url=engine.base_url, depth=0)
    sweep = sweep_create(engine=engine, axis="concurrency", values=[1, 2], spec=spec)
    assert admin_client_.get("/admin/bench/sweep/").status_code == 200
    assert admin_client_.get(f"/admin/bench/sweep/{sweep.pk}/change/").status_code == 200


def _fake_table(values, run):
    row = {
        "run": run, "status": "done", "reason": "", "tainted": False, "aggregate_decode_tokens_per_s": 10.0,
        "aggregate_decode_tokens_per_s_sd": 0.1, "per_stream_decode_tokens_per_s": 10.0,
        "per_stream_decode_tokens_per_s_sd": None, "aggregate_prefill_tokens_per_s": 100.0,
        "aggregate_prefill_tokens_per_s_sd": None, "ttft_ms": 5.0, "ttft_p90_ms": None, "ttft_ms_sd": None,
        "requests": 1, "ok": 1, "error_share": 0.0, "errors": {},
    }  # fmt: skip
    return [{**row, "value": v} for v in values]


@pytest.mark.django_db
def test_the_sweep_page_and_the_list_cost_the_same_queries_whatever_their_size(operator_client, make_engine):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    engine = make_engine("http://127.0.0.1:9", name="q")
    spec = RunSpec(engine_name="q", engine_kind="vllm", base_url=engine.base_url, depth=0)
    run = Run.objects.create(engine=engine, params_hash="x", status="done")

    def page_queries(values, extra_sweeps):
        sweep = sweep_create(engine=engine, axis="concurrency", values=values, spec=spec)
        Sweep.objects.filter(pk=sweep.pk).update(status="done", table=_fake_table(values, run.pk))
        for _ in range(extra_sweeps):
            sweep_create(engine=engine, axis="concurrency", values=values, spec=spec)
        with CaptureQueriesContext(connection) as detail:
            assert operator_client.get(f"/bench/sweeps/{sweep.pk}/").status_code == 200
        with CaptureQueriesContext(connection) as index:
            assert operator_client.get("/bench/").status_code == 200
        return len(detail), len(index)

    small = page_queries([1], 0)
    large = page_queries([1, 2, 4, 8, 16, 32, 64, 128], 5)
    assert small == large
