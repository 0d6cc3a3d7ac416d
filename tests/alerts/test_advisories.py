"""Advisories (severity info) are quiet: they never shade a chart, never taint a benchmark run, and
"Firing alerts" ranks by severity first, so an acknowledged critical stays above any advisory."""

from datetime import timedelta

import pytest
from django.utils import timezone

from sparkops.alerts.models import AlertEvent
from sparkops.alerts.selectors import firing_alerts
from sparkops.live.chartdata import alert_periods
from sparkops.live.ranges import parse_range
from sparkops.measured.conditions import firing_alerts_during

pytestmark = pytest.mark.django_db


def _event(fleet, rule, severity, minutes_ago, **extra):
    now = timezone.now()
    return AlertEvent.objects.create(
        rule=rule,
        severity=severity,
        state="firing",
        engine=fleet["vllm"],
        subject=f"{rule}-subject",
        message=f"{rule} message",
        started_at=now - timedelta(minutes=minutes_ago),
        fired_at=now - timedelta(minutes=minutes_ago),
        **extra,
    )


def test_firing_alerts_rank_by_severity_then_newest_first(fleet, operator):
    acked_critical = _event(
        fleet, "engine_down", "critical", 30, acknowledged_at=timezone.now(), acknowledged_by=operator
    )
    old_info = _event(fleet, "unit_no_restart", "info", 40)
    new_info = _event(fleet, "advisory_two", "info", 1)
    warning = _event(fleet, "kv_saturated", "warning", 5)
    new_critical = _event(fleet, "engine_unresponsive", "critical", 2)
    assert [e.pk for e in firing_alerts()] == [new_critical.pk, acked_critical.pk, warning.pk, new_info.pk, old_info.pk]


def test_advisories_never_shade_charts(fleet):
    _event(fleet, "unit_no_restart", "info", 10)
    warning = _event(fleet, "kv_saturated", "warning", 5)
    periods = alert_periods(rng=parse_range({"range": "1h"}), engine=fleet["vllm"])
    assert [p["severity"] for p in periods] == ["warning"] and warning.rule in periods[0]["title"]


def test_advisories_never_taint_a_benchmark_run(fleet):
    now = timezone.now()
    _event(fleet, "unit_no_restart", "info", 10)
    assert firing_alerts_during(engine=fleet["vllm"], start=now - timedelta(minutes=1), end=now) == []
    _event(fleet, "kv_saturated", "warning", 5)
    assert firing_alerts_during(engine=fleet["vllm"], start=now - timedelta(minutes=1), end=now) == [
        "alert kv_saturated (warning) was firing"
    ]


def test_marks_name_the_silence_or_window_that_covers_each_alert(fleet, operator):
    from sparkops.alerts.models import MaintenanceWindow, Silence
    from sparkops.alerts.selectors import mark_suppressed

    now = timezone.now()
    kv = _event(fleet, "kv_saturated", "warning", 5)
    down = _event(fleet, "engine_down", "critical", 3)
    llama = AlertEvent.objects.create(
        rule="engine_down",
        severity="critical",
        state="firing",
        engine=fleet["llama"],
        subject="llama-side",
        message="down",
        started_at=now,
        fired_at=now,
    )
    host_event = AlertEvent.objects.create(
        rule="memory_pressure",
        severity="warning",
        state="firing",
        host=fleet["host"],
        subject="spark-1",
        message="PSI",
        started_at=now,
        fired_at=now,
    )
    silence = Silence.objects.create(
        engine=fleet["vllm"], rule="kv_saturated", until=now + timedelta(hours=1), created_by=operator
    )
    Silence.objects.create(engine=fleet["vllm"], rule="kv_saturated", until=now - timedelta(minutes=1))  # over
    marked = {e.pk: e for e in mark_suppressed([kv, down, llama, host_event])}
    assert marked[kv.pk].silenced_by == silence
    assert marked[down.pk].silenced_by is None and marked[llama.pk].silenced_by is None
    assert marked[host_event.pk].silenced_by is None
    whole_host = Silence.objects.create(host=fleet["host"], until=now + timedelta(hours=2))
    window = MaintenanceWindow.objects.create(
        engine=fleet["llama"], starts_at=now - timedelta(minutes=1), ends_at=now + timedelta(minutes=30)
    )
    marked = {e.pk: e for e in mark_suppressed([kv, down, llama, host_event])}
    assert marked[kv.pk].silenced_by == whole_host  # the one that ends last
    assert marked[llama.pk].silenced_by == whole_host and marked[llama.pk].maintenance == window
    assert marked[host_event.pk].silenced_by == whole_host and marked[down.pk].maintenance is None


def test_the_marks_titles_cost_no_query_per_alert(fleet, django_assert_num_queries):
    """A mark's title names its silence's or window's engine or host (Silence.__str__): fetched with it,
    not one query per firing alert on every page that lists them."""
    from sparkops.alerts.models import MaintenanceWindow, Silence
    from sparkops.alerts.selectors import mark_suppressed

    now = timezone.now()
    events = [
        _event(fleet, rule, "warning", n) for n, rule in enumerate(("kv_saturated", "engine_down", "clock_low"), 1)
    ]
    Silence.objects.create(engine=fleet["vllm"], until=now + timedelta(hours=1))
    Silence.objects.create(host=fleet["host"], until=now + timedelta(hours=2))
    MaintenanceWindow.objects.create(engine=fleet["vllm"], starts_at=now, ends_at=now + timedelta(hours=1))
    events = list(AlertEvent.objects.filter(pk__in=[e.pk for e in events]).select_related("engine", "host"))
    with django_assert_num_queries(2):  # the silences, the windows
        titles = [(str(e.silenced_by), str(e.maintenance)) for e in mark_suppressed(events)]
    assert titles[0][0].endswith("on spark-1 until " + f"{now + timedelta(hours=2):%Y-%m-%d %H:%M}"), titles
    assert "vllm-main" in titles[0][1], titles
