"""Benchmarks and quality probes are two declarations of one measured-run core (sparkops/measured/):
each kind's Celery tasks answer to the names users' beat rows store, and the beat's static sweeps reach
a task that exists. (The tasks at work: tests/benchmarks, tests/probes, tests/test_routed_controls.py.)"""

from dataclasses import astuple

from dashboard.schedule import BEAT_SCHEDULE
from sparkops.celery import app
from sparkops.measured.registry import KINDS

# Stored in django_celery_beat rows (a profile's PeriodicTask) and in the static beat schedule:
# renaming one strands every user's schedule.
STORED = {
    "bench": ("bench.run_execute", "bench.profile_scheduled", "bench.release_postponed", "bench.sweep_stale"),
    "probe": ("probe.run_execute", "probe.profile_scheduled", "probe.release_postponed", "probe.sweep_stale"),
}


def test_every_kind_is_declared_once_django_starts_and_its_tasks_keep_their_stored_names():
    assert sorted(KINDS) == ["bench", "probe"]  # declared by each app's ready(), in every process
    for label, names in STORED.items():
        tasks = astuple(KINDS[label].tasks)
        assert tuple(t.name for t in tasks) == names
        for name, task in zip(names, tasks, strict=True):
            assert app.tasks[name] is task  # the worker finds the very task a beat row names


def test_the_beat_sweeps_of_every_kind_name_a_registered_task():
    measured = [e["task"] for e in BEAT_SCHEDULE.values() if e["task"].split(".")[0] in KINDS]
    assert {"bench.sweep_stale", "bench.release_postponed", "probe.sweep_stale", "probe.release_postponed"} <= set(
        measured
    )
    assert all(name in app.tasks for name in measured)
