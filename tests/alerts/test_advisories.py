"""Advisories (severity info) are quiet: they never shade a chart, never taint a benchmark run, and
"Firing alerts" ranks by severity first, so an acknowledged critical stays above any advisory."""
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.alerts.models import AlertEvent
from dashboard.alerts.selectors import firing_alerts
from dashboard.bench.conditions import firing_alerts_during
from dashboard.live.chartdata import alert_periods
from dashboard.live.ranges import parse_range

pytestmark = pytest.mark.django_db


def _event(fleet, rule, severity, minutes_ago, **extra):
    now = timezone.now()
    return AlertEvent.objects.create(rule=rule, severity=severity, state="firing", engine=fleet["vllm"],
                                     subject=f"{rule}-subject", message=f"{rule} message",
                                     started_at=now - timedelta(minutes=minutes_ago),
                                     fired_at=now - timedelta(minutes=minutes_ago), **extra)


def test_firing_alerts_rank_by_severity_then_newest_first(fleet, operator):
    acked_critical = _event(fleet, "engine_down", "critical", 30, acknowledged_at=timezone.now(), acknowledged_by=operator)
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
        "alert kv_saturated (warning) was firing"]
