"""`sparkops poll --once --json` prints the contract keys; the beat entries name real tasks."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from dashboard import schedule
from dashboard.models import Engine
from sparkops.collectors import gpu
from tests.collectors.conftest import fixture_bytes

ENGINE_KEYS = {
    "name",
    "kind",
    "up",
    "error",
    "models",
    "requests_running",
    "requests_waiting",
    "kv_cache_usage",
    "kv_pool_tokens",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    "prefix_cache_hit_rate",
    "prompt_tokens_total",
    "generation_tokens_total",
    "unit",
}
GPU_KEYS = {
    "index",
    "name",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "pstate",
    "utilization_pct",
    "power_w",
    "temperature_c",
    "clocks_event_reasons",
}


@pytest.mark.django_db(transaction=True)
def test_poll_once_json(fleet, http_server, settings, tmp_path):
    settings.SPARKOPS_GPU_BACKEND = "none"
    gpu.reset_backend()
    url = http_server(
        {
            "/health": (200, b"", {}),
            "/metrics": (200, fixture_bytes("vllm", "0.33.0_metrics_busy.txt"), {}),
            "/v1/models": (200, fixture_bytes("vllm", "0.33.0_v1_models.json"), {}),
        }
    )
    Engine.objects.filter(pk=fleet["vllm"].pk).update(url=url)
    out = StringIO()
    call_command("poll", "--once", "--json", "--host", "spark-1", stdout=out)
    data = json.loads(out.getvalue())
    assert {"time", "engines", "host", "gpus", "processes"} <= set(data)
    engines = {e["name"]: e for e in data["engines"]}
    assert set(engines["vllm-main"]) >= ENGINE_KEYS
    assert engines["vllm-main"]["up"] is True and engines["vllm-main"]["kv_pool_tokens"] == 766464
    assert isinstance(engines["vllm-main"]["unit"], dict)  # the host poll's unit state, read by the engine poll
    assert engines["llama-side"]["up"] is False and "refused" in engines["llama-side"]["error"]
    assert {"mem_total_bytes", "mem_available_bytes", "swap_used_bytes", "psi"} <= set(data["host"])
    assert {"compilers", "compilers_rss_bytes"} <= set(data["processes"])
    assert all(set(g) >= GPU_KEYS for g in data["gpus"])
    gpu.reset_backend()


def test_every_beat_entry_expires_and_names_a_registered_task():
    from sparkops.celery import app

    app.loader.import_default_modules()
    for name, entry in schedule.beat_schedule().items():
        assert entry["options"]["expires"] > 0, name
        assert entry["task"] in app.tasks, name


@pytest.mark.django_db(transaction=True)  # the scheduler closes and reopens its connection
def test_beat_drops_static_entries_the_code_no_longer_declares():
    """django-celery-beat copies the static schedule into rows and never deletes one: an entry
    removed from the code (the old 1 s probe) must not go on being sent. A row is the schedule's by
    its mark (StaticBeatEntry), not by its name: a UI-made row named like a static entry is kept."""
    from celery import Celery
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    from dashboard.beat import SparkOpsScheduler
    from dashboard.models import StaticBeatEntry
    from dashboard.schedule import beat_schedule

    current = beat_schedule()
    every_s = IntervalSchedule.objects.create(every=1, period="seconds")
    rows = {
        name: PeriodicTask.objects.create(name=name, task=task, interval=every_s)
        for name, task in (
            ("collectors-probe", "collectors.probe"),  # copied by an earlier beat, since retired
            ("bench profile 3", "bench.profile_scheduled"),  # a profile's cron, made in the UI
            ("bench-nightly-by-hand", "bench.profile_scheduled"),  # made by hand, named like a static entry
        )
    }
    StaticBeatEntry.objects.create(task=rows["collectors-probe"])
    app = Celery("beat-test", set_as_current=False)
    app.conf.beat_schedule = current
    scheduler = SparkOpsScheduler(app=app, lazy=False)
    assert "collectors-probe" not in scheduler.schedule
    assert not PeriodicTask.objects.filter(name="collectors-probe").exists()
    assert PeriodicTask.objects.filter(name="bench profile 3").exists()  # made in the UI: kept
    assert PeriodicTask.objects.filter(name="bench-nightly-by-hand").exists()  # not the schedule's: kept
    assert set(current) <= set(PeriodicTask.objects.values_list("name", flat=True))
    marked = set(PeriodicTask.objects.filter(static_entry__isnull=False).values_list("name", flat=True))
    assert marked == set(current)  # what the next start deletes once the code drops it


@pytest.mark.django_db(transaction=True)  # the migration's step runs on committed rows, as on a live database
def test_the_migration_marks_the_static_rows_beat_made_before_rows_were_marked():
    """Rows copied by a beat that told static rows apart by their name prefix become the schedule's."""
    import importlib

    from django.apps import apps
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    from dashboard.beat import retired_static_entries
    from dashboard.models import StaticBeatEntry

    migration = importlib.import_module("dashboard.migrations.0012_static_beat_entry")
    every_s = IntervalSchedule.objects.create(every=1, period="seconds")
    for name in ("collectors-probe", "alerts-renotify", "bench-sweep-stale", "bench profile 3"):
        PeriodicTask.objects.create(name=name, task="x", interval=every_s)
    migration.mark_static_rows(apps, None)
    marked = set(StaticBeatEntry.objects.values_list("task__name", flat=True))
    assert marked == {"collectors-probe", "alerts-renotify", "bench-sweep-stale"}
    assert retired_static_entries({"alerts-renotify": {}, "bench-sweep-stale": {}}) == ["collectors-probe"]
    assert PeriodicTask.objects.filter(name="bench profile 3").exists()
