"""Routed controls (issue 48, item 5): the Restart button, the unit fix and benchmark runs go to the
owning box's Celery queue (`host.<name>`, a list in the real Redis broker, read here); a box whose
worker stopped reporting refuses them at once with the reason, and nothing is written or queued.
A box's reachability is collector_stale's own judgement: the tests move the report, not the clock."""

import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.urls import reverse

from dashboard.clock import db_now
from dashboard.models import Host
from sparkops.alerts.models import AlertNote, AlertRule
from sparkops.alerts.rule_config import rule_settings
from sparkops.alerts.rules import REGISTRY
from sparkops.alerts.rules.host import stale_limit
from sparkops.alerts.services import external_alert_fire
from sparkops.benchmarks.models import PairRun, Profile, Run, Sweep
from sparkops.benchmarks.spec import RunSpec
from sparkops.benchmarks.sweep_views import sweep_enqueue
from sparkops.benchmarks.tasks import bench_profile_scheduled
from sparkops.changelog.models import Entry
from sparkops.controls.unitfix_tasks import fix_request
from sparkops.experiments.models import Experiment
from sparkops.poller.fleet import BoxUnreachable, box_reachable
from sparkops.probes.models import ProbeProfile, ProbeRun
from tests.boxes import waiting
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db
QUEUE = "host.spark-1"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def broker():
    """The real broker, its `host.spark-1` list empty before and after."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(QUEUE)
    yield client
    client.delete(QUEUE)


def reported(host, seconds_ago):
    """HOST's worker last stored its report SECONDS_AGO, by the database's clock (which judges it)."""
    Host.objects.filter(pk=host.pk).update(last_report_at=db_now() - timedelta(seconds=seconds_ago))


def stale_s():
    return stale_limit().total_seconds() + 57


@pytest.fixture
def box(fleet):
    """spark-1 with unit actions on, its worker fresh; a down llama-side with its alert open."""
    Host.objects.filter(pk=fleet["host"].pk).update(unit_actions=True)
    reported(fleet["host"], 0)
    event = external_alert_fire(
        rule="engine_down", severity="critical", engine=fleet["llama"], subject="llama-side", message="down"
    )
    fleet["llama"].refresh_from_db()
    return {**fleet, "event": event}


def test_reachable_is_collector_stales_judgement_at_its_configured_intervals(fleet):
    host = fleet["host"]
    ok, why = box_reachable(host)
    assert not ok and why.startswith("box spark-1 has no worker yet: none has reported since the box was added")
    assert "sparkops worker --host spark-1" in why
    AlertRule.objects.create(key="collector_stale", params={"intervals": 10})  # the operator's own limit
    limit = settings.SPARKOPS_POLL_INTERVAL * 10 + max(
        settings.SPARKOPS_FLUSH_INTERVAL, settings.SPARKOPS_POLL_INTERVAL
    )
    assert stale_limit().total_seconds() == limit
    rule = REGISTRY["collector_stale"]
    for age, reachable in ((limit - 2, True), (limit + 2, False)):
        reported(host, age)
        (finding,) = rule.evaluate(settings=rule_settings(rule))
        assert box_reachable(host)[0] is reachable and finding.active is not reachable, (age, finding)

    at = Host.objects.get(pk=host.pk).last_report_at
    assert box_reachable(host, now=at + timedelta(seconds=limit - 0.1)) == (True, "")
    ok, why = box_reachable(host, now=at + timedelta(seconds=73))
    assert not ok
    assert why == (
        f"box spark-1 unreachable: its worker (queue host.spark-1) last reported {at:%H:%M:%S} UTC, 73 s ago "
        f"(collector_stale's limit: {limit:g} s)"
    )


def test_the_restart_button_queues_on_a_live_box_and_is_refused_for_a_stale_one(
    box, broker, admin_client_, admin_user, django_capture_on_commit_callbacks
):
    url = reverse("engine-restart", args=["llama-side"])
    form = {"confirm": "llama-side.service"}
    reported(box["host"], stale_s())
    page = admin_client_.post(url, form, follow=True).content.decode()
    assert "Not restarted: box spark-1 unreachable: its worker (queue host.spark-1) last reported" in page
    assert "nothing was queued" in page
    assert waiting(QUEUE) == [] and not Entry.objects.exists()
    assert not AlertNote.objects.filter(kind="unit_action").exists()

    reported(box["host"], 0)
    with django_capture_on_commit_callbacks(execute=True):
        page = admin_client_.post(url, form, follow=True).content.decode()
    assert "Restart of llama-side.service sent to spark-1" in page
    assert waiting(QUEUE) == [("dashboard.unit_restart", [box["llama"].pk, box["event"].pk, admin_user.pk])]
    assert Entry.objects.count() == 1


def test_the_unit_fix_queues_on_a_live_box_and_is_refused_for_a_stale_one(
    box, broker, admin_user, settings, django_capture_on_commit_callbacks
):
    settings.SPARKOPS_UNIT_ACTIONS = True
    check = "restart_always_bounded"
    reported(box["host"], stale_s())
    with pytest.raises(BoxUnreachable, match=r"^box spark-1 unreachable: .*; nothing was queued\.$"):
        fix_request(engine=box["llama"], checks=[check], user=admin_user)
    assert waiting(QUEUE) == [] and not Entry.objects.exists()

    reported(box["host"], 0)
    with django_capture_on_commit_callbacks(execute=True):
        fix_request(engine=box["llama"], checks=[check], user=admin_user)
    assert waiting(QUEUE) == [("dashboard.unit_fix", [box["llama"].pk, [check], admin_user.pk])]


def test_the_unit_fix_page_says_why(box, broker, admin_client_):
    reported(box["host"], stale_s())
    url = reverse("engine-unit-fix", args=["llama-side"])
    response = admin_client_.post(url, {"check": "restart_always_bounded"})
    said = [str(m) for m in response.wsgi_request._messages]
    assert len(said) == 1 and said[0].startswith("Not applied: box spark-1 unreachable: its worker"), said
    assert waiting(QUEUE) == [] and not Entry.objects.exists()


@pytest.fixture
def profiles(box):
    engine = box["vllm"]
    bench = Profile.objects.create(name="short", engine=engine, depth=0, output_tokens=8, reps=1)
    other = Profile.objects.create(name="short-b", engine=box["llama"], depth=0, output_tokens=8, reps=1)
    probe = ProbeProfile.objects.create(name="tools", engine=engine, kind="tool")
    return {"bench": bench, "other": other, "probe": probe}


def _posts(profiles, engine, other):
    """(what, URL, form, the rows it makes, the task it queues) of every page that queues a measured run."""
    rate = {
        "engine": engine.pk,
        "rate": 2,
        "duration_s": 5,
        "arrival": "poisson",
        "seed": 0,
        "slo_ttft_ms": 2000,
        "slo_tpot_ms": 100,
        "depth": 0,
        "output_tokens": 16,
    }
    sweep = {
        "engine": engine.pk,
        "axis": "concurrency",
        "values": "1,2",
        "depth": 0,
        "concurrency": 1,
        "output_tokens": 16,
        "reps": 1,
        "mode": "cold",
        "error_threshold": 0.2,
    }
    experiment = {
        "name": "mtp",
        "engine_a": engine.pk,
        "engine_b": other.pk,
        "reps": 3,
        "depth": 0,
        "output_tokens": 16,
        "mode": "cold",
        "probe": "",
        "flags": "--speculative-config",
    }
    pair = {"profile_a": profiles["bench"].pk, "profile_b": profiles["other"].pk}
    return [
        ("bench run", reverse("bench:profile-run", args=[profiles["bench"].pk]), {}, Run, "bench.run_execute"),
        ("probe run", reverse("probes:profile-run", args=[profiles["probe"].pk]), {}, ProbeRun, "probe.run_execute"),
        ("rate run", reverse("bench:rate-new"), rate, Run, "bench.rate_execute"),
        ("sweep", reverse("bench:sweep-new"), sweep, Sweep, "bench.sweep_execute"),
        ("pair", reverse("bench:pair-new"), pair, PairRun, "bench.pair_execute"),
        ("experiment", reverse("experiments:new"), experiment, Experiment, "experiments.advance"),
    ]


def test_every_measured_run_page_queues_on_a_live_box_and_refuses_a_stale_one(
    box, profiles, broker, operator_client, django_capture_on_commit_callbacks
):
    for what, url, form, model, task in _posts(profiles, box["vllm"], box["llama"]):
        before = model.objects.count()
        reported(box["host"], stale_s())
        page = operator_client.post(url, form, follow=True).content.decode()
        assert "box spark-1 unreachable: its worker (queue host.spark-1) last reported" in page, what
        assert model.objects.count() == before and waiting(QUEUE) == [], what

        reported(box["host"], 0)
        with django_capture_on_commit_callbacks(execute=True):
            response = operator_client.post(url, form)
        assert response.status_code == 302, (what, response.content.decode()[-3000:])
        assert model.objects.count() > before, what
        assert [name for name, _ in waiting(QUEUE)] == [task], what
        broker.delete(QUEUE)


def test_a_sweep_for_a_stale_box_is_refused_by_the_service_too(box, broker):
    reported(box["host"], stale_s())
    spec = RunSpec(
        engine_name="vllm-main", engine_kind="vllm", base_url=box["vllm"].base_url, depth=0, reps=1, output_tokens=16
    )
    with pytest.raises(BoxUnreachable):
        sweep_enqueue(engine=box["vllm"], axis="concurrency", values=[1, 2], spec=spec)
    assert not Sweep.objects.exists() and waiting(QUEUE) == []


def test_a_scheduled_run_for_a_stale_box_is_recorded_as_skipped_with_the_reason(profiles, broker):
    reported(profiles["bench"].engine.host, stale_s())
    bench_profile_scheduled(profiles["bench"].pk)  # what beat sends
    run = Run.objects.get()
    assert run.status == Run.Status.REFUSED and run.trigger == Run.Trigger.SCHEDULED
    assert run.reason.startswith("skipped: box spark-1 unreachable: its worker (queue host.spark-1)"), run.reason
    assert run.started_at is None and waiting(QUEUE) == []


def test_a_scheduled_run_is_sent_to_its_boxs_queue_not_run_where_beats_message_landed(
    profiles, broker, django_capture_on_commit_callbacks
):
    """Beat's message is taken by any worker of the fleet; the run it makes is measured by the box's own."""
    reported(profiles["bench"].engine.host, 0)
    with django_capture_on_commit_callbacks(execute=True):
        bench_profile_scheduled(profiles["bench"].pk)
    run = Run.objects.get()
    assert run.status == Run.Status.QUEUED and run.started_at is None and run.reason == ""
    assert waiting(QUEUE) == [("bench.run_execute", [run.pk])]


def test_a_postponed_run_whose_box_went_stale_is_skipped_not_released(profiles, broker):
    from sparkops.benchmarks.schedule import runs_release_postponed
    from sparkops.benchmarks.services import run_create

    profile = profiles["bench"]
    run = run_create(engine=profile.engine, spec=profile.spec(), profile=profile, trigger=Run.Trigger.SCHEDULED)
    run.postpone("vllm-main is starting")
    reported(profile.engine.host, stale_s())
    assert runs_release_postponed() == 0
    run.refresh_from_db()
    assert run.status == Run.Status.REFUSED and run.reason.startswith("skipped: box spark-1 unreachable"), run.reason
    assert waiting(QUEUE) == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
    reason="a worker subprocess needs a database server",
)
def test_a_single_box_install_waits_for_its_own_workers_first_report_then_restarts_through_it(
    fleet, broker, admin_client_, tmp_path
):
    """One box: the web refuses a restart until the box's own `sparkops worker` has reported (it
    says so), then the worker takes it from its queue and runs systemctl (a script that logs)."""
    Host.objects.filter(pk=fleet["host"].pk).update(unit_actions=True)
    calls = tmp_path / "calls"
    systemctl = tmp_path / "systemctl"
    systemctl.write_text(
        f"#!{sys.executable}\nimport sys\nopen({str(calls)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
    )
    systemctl.chmod(0o755)
    url, form = reverse("engine-restart", args=["llama-side"]), {"confirm": "llama-side.service"}
    page = admin_client_.post(url, form, follow=True).content.decode()
    assert "Not restarted: box spark-1 has no worker yet: none has reported since the box was added" in page

    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "sparkops.settings",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{connection.settings_dict['NAME']}",
        "SPARKOPS_UNIT_ACTIONS": "1",
        "SPARKOPS_SYSTEMCTL": str(systemctl),
        "SPARKOPS_VAR_DIR": str(tmp_path / "var"),
        "SPARKOPS_RUNTIME_DIR": str(tmp_path / "run"),
    }
    env.pop("SPARKOPS_TEST_DB_NAME", None)
    log = tmp_path / "worker.log"
    with open(log, "w") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "sparkops.cli", "worker", "--host", "spark-1", "--concurrency", "1"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        assert wait_for(lambda: box_reachable(fleet["host"])[0], timeout=60), log.read_text()[-3000:]
        page = admin_client_.post(url, form, follow=True).content.decode()
        assert "Restart of llama-side.service sent to spark-1" in page
        done = "systemctl restart llama-side.service on spark-1: done"
        assert wait_for(
            lambda: AlertNote.objects.filter(text=done).exists() or Entry.objects.filter(title=done).exists(), 60
        ), log.read_text()[-3000:]
        asked = [c for c in calls.read_text().splitlines() if not c.startswith("show ")]  # its poller reads too
        assert asked == ["reset-failed llama-side.service", "restart llama-side.service"]
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
