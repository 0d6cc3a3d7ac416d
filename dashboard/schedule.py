"""The static Celery beat schedule, composed from each concern's `schedule_entries()`, and
the resident duties: sub-minute upkeep each concern asks of the fleet's leading worker
(`resident_duties()`: name -> (interval s, callable)), run by dashboard/services/resident.py
without a Celery task per run.

Each beat entry: one commented line, and `expires`, so a stalled worker drops stale runs
instead of piling them up (tests/collectors/test_commands.py checks it). Benchmark
schedules live in the database through django-celery-beat (editable in the UI)."""
from importlib import import_module

SCHEDULE_MODULES = ("dashboard.collectors.schedule", "dashboard.alerts.schedule", "dashboard.bench.schedule")


def beat_schedule():
    schedule = {}
    for module_name in SCHEDULE_MODULES:
        entries = import_module(module_name).schedule_entries()
        clash = set(schedule) & set(entries)
        if clash:
            raise ValueError(f"duplicate beat entries: {sorted(clash)}")
        schedule.update(entries)
    return schedule


def resident_duties():
    duties = {}
    for module_name in SCHEDULE_MODULES:
        entries = getattr(import_module(module_name), "resident_duties", dict)()
        clash = set(duties) & set(entries)
        if clash:
            raise ValueError(f"duplicate resident duties: {sorted(clash)}")
        duties.update(entries)
    return duties
