"""Experiment pages: the form (bad input re-renders, changes nothing), the page of a finished
experiment, "record the verdict" as a change-log measurement entry with evidence, roles."""

import pytest
from django.urls import reverse

from sparkops.changelog.models import Entry
from sparkops.experiments.create import experiment_create
from sparkops.experiments.models import Experiment
from sparkops.experiments.runner import experiment_advance
from tests.boxes import worker_reported

pytestmark = pytest.mark.django_db(transaction=True)


def test_form_refuses_bad_input_and_creates_nothing(operator_client, fleet):
    data = {
        "name": "x",
        "engine_a": fleet["vllm"].pk,
        "engine_b": fleet["vllm"].pk,
        "reps": 2,
        "depth": 0,
        "output_tokens": 16,
        "mode": "cold",
        "flags": "",
    }
    resp = operator_client.post(reverse("experiments:new"), data)
    assert resp.status_code == 200 and "Ensure this value is greater than or equal to 3" in resp.content.decode()
    resp = operator_client.post(reverse("experiments:new"), {**data, "reps": 3, "flags": "mtp"})
    assert "&#x27;mtp&#x27; is not a launch flag" in resp.content.decode()
    assert Experiment.objects.count() == 0


def test_viewer_reads_but_cannot_start_or_record(viewer_client, fleet):
    e = experiment_create(name="ro", engine_a=fleet["vllm"], engine_b=fleet["llama"], workload={"depth": 0})
    assert viewer_client.get(reverse("experiments:detail", args=[e.pk])).status_code == 200
    assert viewer_client.get(reverse("experiments:new")).status_code == 403
    assert viewer_client.post(reverse("experiments:record", args=[e.pk])).status_code == 403
    assert viewer_client.get(reverse("experiments:index")).status_code == 200


def test_finished_page_and_record_the_verdict(operator_client, sim, make_engine):
    a = make_engine(sim("vllm", rate=100.0, ttft=0.01).url, name="ctl")
    b = make_engine(sim("vllm", rate=50.0, ttft=0.01).url, name="var")
    e = experiment_advance(
        experiment=experiment_create(
            name="half speed", engine_a=a, engine_b=b, workload={"depth": 0, "output_tokens": 24}
        )
    )
    assert e.status == "done", e.reason
    page = operator_client.get(reverse("experiments:detail", args=[e.pk])).content.decode()
    assert page.count('<tr class=""><td data-label="#">') == 6 and "percentile bootstrap" in page
    assert 'class="verdict-slower">slower' in page  # decode at half the rate
    assert "has no configuration snapshot" in page  # engines without a unit: the variant is not verified
    # the button's help is a sentence of its own (issue 30: it read "Record the verdict a change-log …")
    assert (
        '<span class="muted" id="exp-record-help">Writes a measurement entry to the change log, with this page '
        "and every counted run as its evidence.</span>" in page
    )
    resp = operator_client.post(reverse("experiments:record", args=[e.pk]))
    assert resp.status_code == 302
    e.refresh_from_db()
    entry = Entry.objects.get(pk=e.entry_id)
    ratio = e.verdict["ratio"]["decode_tokens_per_s"]
    assert ratio == pytest.approx(0.5, rel=0.03)
    assert entry.kind == "measurement"
    assert entry.title.startswith(f"A/B half speed: B (var) slower than A (ctl) on decode, {ratio:.2f}× [")
    assert "| decode tok/s |" in entry.body_md and "95 % percentile bootstrap" in entry.body_md
    runs = sorted(s.run_id for s in e.slots.all())
    evidence = list(entry.evidence.all())
    assert evidence[0].url == f"/experiments/{e.pk}/"
    assert sorted(ev.ref_id for ev in evidence[1:]) == runs
    assert set(entry.engines.all()) == {a, b}
    # Once only: a second press changes nothing and says why.
    operator_client.post(reverse("experiments:record", args=[e.pk]))
    assert Entry.objects.filter(kind="measurement").count() == 1
    assert (
        "already change-log entry" in operator_client.get(reverse("experiments:detail", args=[e.pk])).content.decode()
    )


def test_arms_on_two_boxes_are_refused(fleet):
    from dashboard.models import Engine, Host
    from sparkops.experiments.create import ExperimentError

    other = Engine.objects.create(
        name="far", kind="vllm", url="http://127.0.0.1:18009", host=Host.objects.create(name="spark-2")
    )
    with pytest.raises(ExperimentError, match="different boxes"):
        experiment_create(name="x", engine_a=fleet["vllm"], engine_b=other, workload={"depth": 0})
    assert Experiment.objects.count() == 0


def test_waiting_page_offers_continue_and_wrong_states_change_nothing(operator_client, fleet):
    e = experiment_create(name="restart me", engine_a=fleet["vllm"], engine_b=fleet["vllm"], workload={"depth": 0})
    url = reverse("experiments:detail", args=[e.pk])
    page = operator_client.get(url).content.decode()
    assert "one engine, restarted by the operator between arms" in page and 'id="exp-continue"' not in page
    resp = operator_client.post(reverse("experiments:continue", args=[e.pk]), follow=True)
    assert "is queued, not waiting for a restart" in resp.content.decode()
    Experiment.objects.filter(pk=e.pk).update(status="waiting", reason="Restart vllm-main into arm B's configuration")
    page = operator_client.get(url).content.decode()
    assert 'id="exp-continue"' in page and "Restart vllm-main into arm B" in page
    resp = operator_client.post(reverse("experiments:record", args=[e.pk]), follow=True)
    assert "only a finished one has a verdict" in resp.content.decode()
    assert operator_client.get(url + "?format=progress").json()["status"] == "waiting"
    # Continue queues the next slot once: a second press (a double click) queues nothing.
    worker_reported(fleet["host"])
    resp = operator_client.post(reverse("experiments:continue", args=[e.pk]), follow=True)
    assert "Continuing" in resp.content.decode()
    resp = operator_client.post(reverse("experiments:continue", args=[e.pk]), follow=True)
    assert "is queued, not waiting for a restart" in resp.content.decode()
    assert Entry.objects.count() == 0
    assert operator_client.get(url + "?format=progress").json() == {
        "experiment": e.pk,
        "status": "queued",
        "done": 0,
        "total": 6,
    }


def test_an_experiment_whose_worker_died_is_failed_by_the_sweep_keeping_what_ran(fleet):
    from datetime import timedelta

    from django.utils import timezone

    from sparkops.benchmarks.models import Run
    from sparkops.experiments.runner import experiments_sweep_stale

    def running(name, run_status, finished_ago_s):
        e = experiment_create(name=name, engine_a=fleet["vllm"], engine_b=fleet["llama"], workload={"depth": 0})
        run = Run.objects.create(engine=fleet["vllm"], params_hash="h", status=run_status)
        Run.objects.filter(pk=run.pk).update(finished_at=timezone.now() - timedelta(seconds=finished_ago_s))
        e.slots.filter(order=0).update(run=run)
        Experiment.objects.filter(pk=e.pk).update(status="running")
        return e

    dead = running("dead", "failed", 3600)
    measuring = running("measuring", "running", 3600)
    just_now = running("between slots", "done", 5)
    assert experiments_sweep_stale() == 1
    dead.refresh_from_db()
    assert dead.status == "failed" and dead.reason.startswith("the worker stopped mid-experiment: 1 of 6")
    assert [s["status"] for s in dead.verdict["slots"]] == ["failed"] + ["pending"] * 5
    assert Experiment.objects.get(pk=measuring.pk).status == "running"
    assert Experiment.objects.get(pk=just_now.pk).status == "running"
