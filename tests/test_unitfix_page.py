"""The audit page's fixes (issue 27 §3): the drop-in previewed as a diff; an admin applies it through the box's
own worker, behind SPARKOPS_UNIT_ACTIONS; the outcome and the observed change-log entry appear on the page.
A simulated box (its systemd honours drop-ins and daemon-reload) with an engine under Restart=on-failure."""

from pathlib import Path

import pytest
from django.urls import reverse

from dashboard.models import Engine, Host
from sparkops.changelog.models import Entry
from sparkops.controls.unitfix_tasks import unit_fix
from tests.boxes import worker_reported

FILE = "50-sparkops-restart_always_bounded.conf"
CHECK = "restart_always_bounded"


@pytest.fixture
def box(tmp_path, settings, monkeypatch):
    from simulator.client import Simulation
    from tests.simbox import point_collectors_at

    with Simulation(engines=["vllm:fixme,restart=on-failure"], state_dir=tmp_path / "sim", ready_timeout=60) as sim:
        point_collectors_at(sim, settings, monkeypatch, gpu=False)
        yield sim


@pytest.fixture
def engine(box, settings, db):
    from sparkops.launch.observer import observe_now

    host = Host.objects.create(name=settings.SPARKOPS_HOST_NAME)
    made = Engine.objects.create(
        name="fixme", kind="vllm", url=box.url("fixme"), host=host, unit=box.unit("fixme"), status="up"
    )
    assert observe_now(made) is not None
    return made


def _dropin(box, engine):
    return Path(box.root) / f"etc/systemd/system/{engine.unit}.d/{FILE}"


def _allow(engine, settings):
    Host.objects.filter(pk=engine.host_id).update(unit_actions=True)
    settings.SPARKOPS_UNIT_ACTIONS = True


@pytest.mark.django_db
def test_everyone_previews_the_diff_only_admins_get_the_button(engine, viewer_client, settings):
    _allow(engine, settings)
    page = viewer_client.get(reverse("engine-unit-fix", args=["fixme"])).content.decode()
    assert f"+++ /etc/systemd/system/{engine.unit}.d/{FILE}" in page and "+Restart=always" in page
    assert "data-apply" not in page and "Admins apply fixes" in page
    audit_page = viewer_client.get(reverse("engine-audit", args=["fixme"])).content.decode()
    assert reverse("engine-unit-fix", args=["fixme"]) in audit_page


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["viewer_client", "operator_client"])
def test_only_admins_apply(request, engine, box, settings, who, monkeypatch):
    _allow(engine, settings)
    sent = []
    monkeypatch.setattr(unit_fix, "apply_async", lambda **kw: sent.append(kw))
    client = request.getfixturevalue(who)
    response = client.post(reverse("engine-unit-fix", args=["fixme"]), {"check": CHECK})
    assert response.status_code == 403 and sent == [] and not Entry.objects.filter(kind="incident_note").exists()
    assert not _dropin(box, engine).exists()


@pytest.mark.django_db
def test_an_admins_fix_is_queued_on_the_box_applied_by_its_worker_and_shown(
    engine, box, settings, admin_client_, admin_user, django_capture_on_commit_callbacks, monkeypatch
):
    url = reverse("engine-unit-fix", args=["fixme"])
    page = admin_client_.post(url, {"check": CHECK}, follow=True).content.decode()
    assert "Unit actions are off on" in page and "SPARKOPS_UNIT_ACTIONS=1" in page
    _allow(engine, settings)
    worker_reported(engine.host)
    sent = []
    monkeypatch.setattr(unit_fix, "apply_async", lambda **kw: sent.append(kw))
    with django_capture_on_commit_callbacks(execute=True):
        page = admin_client_.post(url, {"check": CHECK}, follow=True).content.decode()
    assert "Sent to" in page and "data-apply" in page
    assert sent == [{"args": [engine.pk, [CHECK], admin_user.pk], "queue": engine.host.queue}]
    asked = Entry.objects.get(kind="incident_note")
    assert asked.author is None and "requested by ada" in asked.title and FILE in asked.title
    assert asked.is_locked  # SparkOps's own record of the request (issue 45, item 6)
    assert not _dropin(box, engine).exists()  # the web wrote nothing

    settings.SPARKOPS_UNIT_ACTIONS = False  # the worker's own switch
    unit_fix(*sent[0]["args"])
    assert not _dropin(box, engine).exists()
    assert Entry.objects.filter(title__contains="SPARKOPS_UNIT_ACTIONS is not set").exists()

    settings.SPARKOPS_UNIT_ACTIONS = True
    done = unit_fix(*sent[0]["args"])
    assert "Restart=always" in _dropin(box, engine).read_text()
    assert box.show("fixme")["Restart"] == "always"
    assert done.title == f"Unit fix of {engine.unit} on {engine.host.name}: wrote {FILE}", done.title
    observed = Entry.objects.get(kind="flag_change")
    assert f"(set in /etc/systemd/system/{engine.unit}.d/{FILE})" in observed.body_md
    assert f"[entry {observed.pk}]" in done.body_md
    page = admin_client_.get(url).content.decode()
    assert done.title in page and reverse("changelog:entry", args=[observed.pk]) in page
    assert f'data-apply="{CHECK}"' not in page  # the check passes now: nothing left to write for it


@pytest.mark.django_db
def test_the_readiness_fix_budgets_the_slowest_measured_cold_start_and_a_margin(tmp_path, settings, monkeypatch):
    """The simulated llama.cpp unit's helper budget (120 s + the 60 s margin) is past its TimeoutStartSec (90 s):
    the fix's gate is `sparkops wait-ready` by absolute path, with a budget of the slowest measured cold start
    × 1.5 (warm starts do not count while a cold one is known) and TimeoutStartSec above it by the margin."""
    from datetime import timedelta

    from django.utils import timezone

    from dashboard.models import EngineStart
    from simulator.client import Simulation
    from sparkops.audit.run import audit
    from sparkops.controls import unitfix
    from sparkops.launch.observer import observe_now
    from tests.simbox import point_collectors_at

    with Simulation(engines=["llamacpp:gate"], state_dir=tmp_path / "sim", ready_timeout=60) as sim:
        point_collectors_at(sim, settings, monkeypatch, gpu=False)
        host = Host.objects.create(name=settings.SPARKOPS_HOST_NAME)
        engine = Engine.objects.create(
            name="gate", kind="llamacpp", url=sim.url("gate"), host=host, unit=sim.unit("gate"), status="up"
        )
        now = timezone.now()
        for kind, seconds in (("cold", 200), ("cold", 335), ("warm", 30)):
            EngineStart.objects.create(
                engine=engine, kind=kind, started_at=now, healthy_at=now + timedelta(seconds=seconds)
            )
        observe_now(engine)
        plan = unitfix.apply(engine, unitfix.plan(engine, checks=["readiness_budget"]))
        assert plan.applied and plan.refused is None, plan
        (fix,) = plan.fixes
        post = [v for _s, k, v in fix.settings if k == "ExecStartPost"]
        assert post[0] == ""  # the old helper reset first
        argv = post[1].split()
        assert Path(argv[0]).is_absolute() and Path(argv[0]).name == "sparkops" and Path(argv[0]).exists(), argv
        assert argv[1:] == ["wait-ready", "--url", engine.url, "--kind", "llamacpp", "--budget", "503"], argv
        assert ("Service", "TimeoutStartSec", "563") in fix.settings and "slowest cold start 335 s of 2" in fix.note
        observe_now(engine)
        (result,) = [r for r in audit([engine], only_engine=engine) if r.check == "readiness_budget"]
        assert result.status == "pass" and "budget 503 s" in result.evidence, result

        # the simulated box runs the new gate for real on the next start, and journals what it says
        from sparkops.collectors.systemd import journal_read
        from tests.waiting import wait_for

        sim.restart("gate")
        lines: list = []

        def gate_passed():
            entries, _ = journal_read(units=[engine.unit], first_lines=500)
            lines[:] = [
                str(e.get("MESSAGE")) for e in entries if str(e.get("MESSAGE")).startswith("sparkops wait-ready:")
            ]
            return bool(lines) and sim.show("gate")["ActiveState"] == "active"

        assert wait_for(gate_passed, timeout=60), (lines, sim.show("gate"))
        assert f"unit {engine.unit} (TimeoutStartSec 563 s)" in lines[0], lines


@pytest.mark.django_db
def test_cold_start_edges_go_from_the_later_name_to_every_earlier_one_in_one_file(tmp_path, settings, monkeypatch):
    """Three engines of one box with no ordering: the last by name gets one drop-in ordering it after both
    others; the first gets none (the edges go one way, so two fixes never make a cycle)."""
    from simulator.client import Simulation
    from sparkops.controls import unitfix
    from sparkops.launch.observer import observe_now
    from tests.simbox import point_collectors_at

    names = ("ord-1", "ord-2", "ord-3")
    with Simulation(engines=[f"vllm:{n}" for n in names], state_dir=tmp_path / "sim", ready_timeout=60) as sim:
        point_collectors_at(sim, settings, monkeypatch, gpu=False)
        host = Host.objects.create(name=settings.SPARKOPS_HOST_NAME)
        engines = {
            n: Engine.objects.create(name=n, kind="vllm", url=sim.url(n), host=host, unit=sim.unit(n), status="up")
            for n in names
        }
        for engine in engines.values():
            observe_now(engine)
        last = unitfix.plan(engines["ord-3"], checks=["cold_starts_serialized"])
        (fix,) = last.fixes
        assert fix.settings == [("Unit", "After", sim.unit("ord-1")), ("Unit", "After", sim.unit("ord-2"))], fix
        first = unitfix.plan(engines["ord-1"], checks=["cold_starts_serialized"])
        assert first.fixes == [] and {s["check"] for s in first.skipped} == {"cold_starts_serialized"}, first
        assert "`sparkops unit fix ord-2 --check cold_starts_serialized`" in first.skipped[0]["why"], first.skipped
        unitfix.apply(engines["ord-3"], last)
        assert {sim.unit("ord-1"), sim.unit("ord-2")} <= set(sim.show("ord-3")["After"].split())
