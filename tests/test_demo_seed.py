"""The demo's needle probe (`sparkops up --demo`): created once on the demo vLLM engine, scheduled hourly, and
left as the operator made it on every later start."""

import json

import pytest

from dashboard.management.commands.up import DEMO_PROBE, _register_demo_engine, _seed_demo_probe

pytestmark = pytest.mark.django_db


def _demo_engine():
    return _register_demo_engine({"name": "demo-vllm", "kind": "vllm", "url": "http://127.0.0.1:18001", "unit": "x"})


def test_the_demo_seeds_one_small_hourly_needle_probe_once():
    from django_celery_beat.models import PeriodicTask

    from sparkops.probes.models import ProbeProfile

    engine = _demo_engine()
    assert _seed_demo_probe(engine) is True
    assert _seed_demo_probe(_demo_engine()) is False  # a second start: nothing new
    profile = ProbeProfile.objects.get()
    assert (profile.name, profile.engine, profile.kind) == ("demo-needle", engine, "needle")
    assert (profile.tokens, profile.depths, profile.decoys, profile.reps) == (1500, "10,50,90", 2, 3)
    task = PeriodicTask.objects.get()
    assert task == profile.schedule and task.enabled and task.task == "probe.profile_scheduled"
    assert json.loads(task.args) == [profile.pk]
    cron = task.crontab
    assert (cron.minute, cron.hour, cron.day_of_month, cron.month_of_year, cron.day_of_week) == (
        "0",
        "*",
        "*",
        "*",
        "*",
    )
    profile.full_clean()  # the seeded values pass the form's own validation


def test_a_probe_the_operator_changed_is_left_as_it_is():
    from sparkops.probes.models import ProbeProfile
    from sparkops.probes.schedule import probe_set_schedule

    _seed_demo_probe(_demo_engine())
    profile = ProbeProfile.objects.get(name=DEMO_PROBE["name"])
    probe_set_schedule(profile=profile, cron="")  # unscheduled by hand
    ProbeProfile.objects.filter(pk=profile.pk).update(tokens=4096)
    assert _seed_demo_probe(_demo_engine()) is False
    profile.refresh_from_db()
    assert profile.schedule is None and profile.tokens == 4096
