"""Each rule driven through evaluate() with readings in the `sparkops poll --json` contract format."""

from datetime import timedelta

import pytest
from django.utils import timezone

from sparkops.alerts.evaluate import evaluate
from sparkops.alerts.models import AlertEvent, RuleState
from sparkops.alerts.rules.causes import classify
from sparkops.alerts.services import rule_update

pytestmark = pytest.mark.django_db
GIB = 1024**3
EXIT0 = {
    "ActiveState": "inactive",
    "SubState": "dead",
    "Result": "success",
    "ExecMainStatus": "0",
    "ExecMainCode": "1",
    "MainPID": "0",
    "NRestarts": "0",
    "Restart": "on-failure",
}


def open_event(rule, subject):
    return AlertEvent.objects.filter(rule=rule, subject=subject, state__in=["pending", "firing"]).first()


def age_pending(rule, seconds):
    AlertEvent.objects.filter(rule=rule, state="pending").update(started_at=timezone.now() - timedelta(seconds=seconds))


# engine_down ------------------------------------------------------------------------------


def test_engine_down_needs_two_failures_and_names_exit0(fleet):
    vllm = fleet["vllm"]
    vllm.latest = {"unit": EXIT0, "fatal_lines": ["CUDA error: an illegal instruction was encountered"]}
    vllm.save()
    evaluate("engine_liveness", engine=vllm, up=False, reason="connection refused", rechecked=False)
    assert open_event("engine_down", "vllm-main") is None
    evaluate("engine_liveness", engine=vllm, up=False, reason="connection refused", rechecked=True)
    event = open_event("engine_down", "vllm-main")
    assert event.state == "firing" and event.severity == "critical" and event.cause == "exit0_no_restart"
    assert "Restart=on-failure, so systemd will not restart it" in event.message
    assert "illegal instruction" in event.message
    evaluate("engine_liveness", engine=vllm, up=True, reason="")
    event.refresh_from_db()
    assert event.state == "resolved"


def test_engine_down_runs_no_command_it_reads_the_unit_its_probe_collected(fleet, settings, tmp_path):
    """Rules read, collectors run commands: the probe step reads the unit of an engine it found
    down (`collectors/unitnow`) and the rule says why from that, with systemctl and journalctl
    never run during the evaluation (here each would leave a line in CALLS)."""
    from sparkops.collectors.unitnow import UnitNow

    calls = tmp_path / "calls"
    for name in ("systemctl", "journalctl"):
        command = tmp_path / name
        command.write_text(f"#!/bin/sh\necho {name} >> {calls}\nexit 1\n")
        command.chmod(0o755)
        setattr(settings, f"SPARKOPS_{name.upper()}", str(command))
    vllm = fleet["vllm"]
    settings.SPARKOPS_HOST_NAME = vllm.host.name  # its unit is on this box: readable here
    collected = UnitNow(EXIT0, fatal_line="CUDA error: an illegal instruction was encountered")
    evaluate("engine_liveness", engine=vllm, up=False, reason="connection refused", rechecked=True, unit_now=collected)
    event = open_event("engine_down", "vllm-main")
    assert event.cause == "exit0_no_restart" and "illegal instruction" in event.message
    assert event.details["unit"] == EXIT0
    assert not calls.exists()


def test_second_death_alerts_again(fleet):
    vllm = fleet["vllm"]
    for _ in range(2):
        evaluate("engine_liveness", engine=vllm, up=False, reason="connection refused", rechecked=True)
        evaluate("engine_liveness", engine=vllm, up=True, reason="")
    assert AlertEvent.objects.filter(rule="engine_down", state="resolved").count() == 2


def test_engine_not_expected_up_is_quiet(fleet):
    llama = fleet["llama"]
    llama.expected_up = False
    llama.save()
    evaluate("engine_liveness", engine=llama, up=False, reason="connection refused", rechecked=True)
    assert not AlertEvent.objects.exists()


@pytest.mark.parametrize(
    "unit,reason,cause",
    [
        (EXIT0, "connection refused", "exit0_no_restart"),
        ({**EXIT0, "ActiveState": "failed", "Result": "exit-code", "ExecMainStatus": "1"}, "refused", "unit_failed"),
        (
            {**EXIT0, "ActiveState": "failed", "Result": "start-limit-hit", "Restart": "always", "NRestarts": "5"},
            "refused",
            "start_limit_hit",
        ),
        (
            {**EXIT0, "ActiveState": "active", "SubState": "running", "MainPID": "42"},
            "timed out",
            "active_not_answering",
        ),
        ({**EXIT0, "ActiveState": "active", "MainPID": "0"}, "refused", "process_gone"),
        ({**EXIT0, "ActiveState": "activating", "SubState": "auto-restart"}, "refused", "restarting"),
        ({**EXIT0, "Restart": "always"}, "refused", "process_gone"),
        (None, "connection refused", "connection_refused"),
        (None, "timed out (read)", "timeout"),
        (None, "HTTP 503", "http_error"),
    ],
)
def test_cause_classification(unit, reason, cause):
    assert classify(unit=unit, reason=reason).key == cause


def test_activating_too_long():
    unit = {**EXIT0, "ActiveState": "activating", "SubState": "start"}
    assert classify(unit=unit, reason="refused", activating_for_s=30, activating_budget_s=600).key == "starting"
    assert (
        classify(unit=unit, reason="refused", activating_for_s=700, activating_budget_s=600).key
        == "activating_too_long"
    )


# engine_polled rules ----------------------------------------------------------------------


def test_restart_loop_from_nrestarts(fleet):
    vllm = fleet["vllm"]
    for n in range(0, 4):
        evaluate("engine_polled", engine=vllm, reading={"unit": {**EXIT0, "NRestarts": str(n), "Restart": "always"}})
        if n < 3:
            assert open_event("restart_loop", "vllm-main") is None
    assert open_event("restart_loop", "vllm-main").state == "firing"


def test_restart_loop_per_engine_override(fleet):
    rule_update(key="restart_loop", engine=fleet["vllm"], params={"count": 1})
    evaluate("engine_polled", engine=fleet["vllm"], reading={"restarted": True})
    assert open_event("restart_loop", "vllm-main").state == "firing"
    evaluate("engine_polled", engine=fleet["llama"], reading={"restarted": True})
    assert open_event("restart_loop", "llama-side") is None


def test_prefix_cache_drop_against_own_baseline(fleet):
    import time_machine

    vllm = fleet["vllm"]
    rule_update(key="prefix_cache_drop", params={"window_s": 1, "min_queries": 100, "for_s": 0})
    q = h = 0
    with time_machine.travel(timezone.now(), tick=False) as clock:  # polls 0.55 s apart, on a clock
        for _ in range(4):  # a healthy 92 % window sets the baseline
            q, h = q + 1000, h + 920
            evaluate(
                "engine_polled", engine=vllm, reading={"prefix_cache_queries_total": q, "prefix_cache_hits_total": h}
            )
            clock.shift(0.55)
        assert open_event("prefix_cache_drop", "vllm-main") is None
        for _ in range(3):  # 40 %: 52 points down
            q, h = q + 1000, h + 400
            evaluate(
                "engine_polled", engine=vllm, reading={"prefix_cache_queries_total": q, "prefix_cache_hits_total": h}
            )
            clock.shift(0.55)
    event = open_event("prefix_cache_drop", "vllm-main")
    assert event and event.state == "firing" and "below its baseline 92%" in event.message


def test_kv_saturated(fleet):
    rule_update(key="kv_saturated", params={"for_s": 0})
    evaluate("engine_polled", engine=fleet["vllm"], reading={"kv_cache_usage": 0.5})
    assert open_event("kv_saturated", "vllm-main") is None
    evaluate("engine_polled", engine=fleet["vllm"], reading={"kv_cache_usage": 0.97, "requests_waiting": 4})
    assert open_event("kv_saturated", "vllm-main").state == "firing"


def test_queue_growing(fleet):
    rule_update(key="queue_growing", params={"window_s": 60})
    state = RuleState.objects.create(rule="queue_growing", subject="vllm-main")
    import time

    now = time.time()
    state.data = {"samples": [[now - 70, 1], [now - 40, 3], [now - 10, 6]]}
    state.save()
    evaluate("engine_polled", engine=fleet["vllm"], reading={"requests_waiting": 9})
    assert open_event("queue_growing", "vllm-main").state == "firing"
    evaluate("engine_polled", engine=fleet["vllm"], reading={"requests_waiting": 2})
    assert open_event("queue_growing", "vllm-main") is None


def test_unit_no_restart_is_no_longer_a_rule_the_audit_owns_the_finding(fleet):
    """One source of truth: Restart= is judged by the launch audit's restart_always_bounded check
    (a finding and a card badge), not by an alert rule beside it."""
    from django.core.exceptions import ValidationError

    from sparkops.alerts.rules import REGISTRY
    from sparkops.audit.checks import CHECKS

    assert "unit_no_restart" not in REGISTRY and "restart_always_bounded" in CHECKS
    with pytest.raises(ValidationError, match="no rule named 'unit_no_restart'"):
        rule_update(key="unit_no_restart", enabled=True)
    evaluate("engine_polled", engine=fleet["vllm"], reading={"unit": {**EXIT0, "ActiveState": "active"}})
    assert not AlertEvent.objects.filter(severity="info").exists()


# host rules -------------------------------------------------------------------------------


def gpu(**kw):
    base = {
        "index": 0,
        "name": "GB10",
        "sm_clock_mhz": 2450,
        "sm_clock_max_mhz": 2500,
        "pstate": "P0",
        "utilization_pct": 96,
        "clocks_event_reasons": [],
    }
    return {**base, **kw}


def test_gpu_clock_stuck_low_sustained(fleet):
    host = fleet["host"]
    evaluate("host_polled", host=host, reading={"gpus": [gpu(sm_clock_mhz=800)]})
    event = open_event("gpu_clock_stuck_low", "spark-1/gpu0")
    assert event.state == "pending"
    age_pending("gpu_clock_stuck_low", 61)
    evaluate("host_polled", host=host, reading={"gpus": [gpu(sm_clock_mhz=800)]})
    event.refresh_from_db()
    assert event.state == "firing" and "power disconnect" in event.message


def test_gpu_clock_low_with_power_cap_is_explained(fleet):
    evaluate(
        "host_polled",
        host=fleet["host"],
        reading={"gpus": [gpu(sm_clock_mhz=800, clocks_event_reasons=["sw_power_cap"])]},
    )
    evaluate("host_polled", host=fleet["host"], reading={"gpus": [gpu(sm_clock_mhz=800, utilization_pct=10)]})
    assert open_event("gpu_clock_stuck_low", "spark-1/gpu0") is None


def psi(full10=0.0, some60=0.0):
    return {
        "memory": {
            "some": {"avg10": 0, "avg60": some60, "avg300": 0, "total": 0},
            "full": {"avg10": full10, "avg60": 0, "avg300": 0, "total": 0},
        }
    }


def test_memory_pressure(fleet):
    rule_update(key="memory_pressure", params={"for_s": 0})
    ok = {"host": {"mem_total_bytes": 128 * GIB, "mem_available_bytes": 60 * GIB, "swap_used_bytes": 0, "psi": psi()}}
    evaluate("host_polled", host=fleet["host"], reading=ok)
    assert open_event("memory_pressure", "spark-1") is None
    bad = {"host": {**ok["host"], "mem_available_bytes": 2 * GIB, "psi": psi(full10=7.5)}}
    evaluate("host_polled", host=fleet["host"], reading=bad)
    event = open_event("memory_pressure", "spark-1")
    assert "full avg10 7.5%" in event.message and "MemAvailable 2.0 GiB" in event.message


def test_compile_storm_names_processes_and_fix(fleet):
    procs = [
        {"pid": 100 + i, "name": "cicc", "rss_bytes": 3 * GIB, "parent": "ninja", "unit": "vllm-main.service"}
        for i in range(7)
    ]
    reading = {
        "host": {"mem_total_bytes": 128 * GIB},
        "processes": {"compilers": 7, "compilers_rss_bytes": 21 * GIB, "compiler_procs": procs},
    }
    evaluate("host_polled", host=fleet["host"], reading=reading)
    event = open_event("compile_storm", "spark-1")
    assert event.state == "firing" and "cicc[100]" in event.message and "vllm-main.service" in event.message
    assert "MAX_JOBS" in event.message and "NVCC_THREADS" in event.message


def test_kernel_fault(fleet):
    evaluate("host_polled", host=fleet["host"], reading={"kernel_lines": ["usb 1-1: new device"]})
    assert open_event("kernel_fault", "spark-1") is None
    evaluate(
        "host_polled",
        host=fleet["host"],
        reading={"kernel_lines": ["NVRM: Xid (PCI:0000:01:00): 13, Graphics Exception"]},
    )
    event = open_event("kernel_fault", "spark-1")
    assert event.state == "firing" and event.cause == "xid"


def test_collector_stale(fleet, settings):
    host = fleet["host"]
    host.last_report_at = timezone.now()
    host.save()
    evaluate("beat")
    assert open_event("collector_stale", "spark-1/collector") is None
    # A live worker stores its report every SPARKOPS_FLUSH_INTERVAL: a report that old is not stale yet.
    settings.SPARKOPS_FLUSH_INTERVAL = 10.0
    host.last_report_at = timezone.now() - timedelta(seconds=settings.SPARKOPS_POLL_INTERVAL * 3 + 9)
    host.save()
    evaluate("beat")
    assert open_event("collector_stale", "spark-1/collector") is None
    host.last_report_at = timezone.now() - timedelta(seconds=settings.SPARKOPS_POLL_INTERVAL * 3 + 11)
    host.save()
    evaluate("beat")
    assert open_event("collector_stale", "spark-1/collector").state == "firing"


def test_the_leaders_stale_check_goes_through_the_pollers_memory(fleet, settings):
    """The leading worker's upkeep runs the collector-stale check with its poller's alert memory
    (dashboard/schedule.resident_duties): a box gone quiet still pages, and the check's reads are
    the memory's, not made again every 5 s as beat's memory-less backstop makes them."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from dashboard.schedule import resident_duties
    from sparkops.alerts.evaluate import Memory, evaluate_beat

    check = resident_duties(memory=Memory())["alerts-check-stale"][1]
    host = fleet["host"]
    host.last_report_at = timezone.now()
    host.save()
    check()
    with CaptureQueriesContext(connection) as again:
        check()
    with CaptureQueriesContext(connection) as backstop:
        evaluate_beat()
    assert len(again) < len(backstop), (len(again), len(backstop))
    assert open_event("collector_stale", "spark-1/collector") is None
    host.last_report_at = timezone.now() - timedelta(seconds=settings.SPARKOPS_POLL_INTERVAL * 3 + 11)
    host.save()
    check()
    assert open_event("collector_stale", "spark-1/collector").state == "firing"


def test_disabled_rule_resolves_and_stays_quiet(fleet):
    rule_update(key="kv_saturated", params={"for_s": 0})
    evaluate("engine_polled", engine=fleet["vllm"], reading={"kv_cache_usage": 0.99})
    rule_update(key="kv_saturated", enabled=False)
    evaluate("engine_polled", engine=fleet["vllm"], reading={"kv_cache_usage": 0.99})
    assert open_event("kv_saturated", "vllm-main") is None


def test_one_broken_rule_never_stops_the_others(fleet, caplog):
    # kv_saturated cannot compare "junk"; queue_growing, evaluated after it from the same reading, still runs.
    rule_update(key="queue_growing", params={"window_s": 60})
    now = timezone.now().timestamp()
    RuleState.objects.create(
        rule="queue_growing", subject="vllm-main", data={"samples": [[now - 70, 1], [now - 40, 3], [now - 10, 6]]}
    )
    evaluate("engine_polled", engine=fleet["vllm"], reading={"kv_cache_usage": "junk", "requests_waiting": 9})
    assert "alert rule kv_saturated failed" in caplog.text
    assert open_event("queue_growing", "vllm-main") is not None


def test_steady_probe_and_disabled_rules_cost_only_the_snapshot(fleet, django_assert_num_queries):
    vllm = fleet["vllm"]
    evaluate("engine_liveness", engine=vllm, up=True)  # the first probe creates the rule's memory
    with django_assert_num_queries(3):  # rule rows (and whether any is overridden), rule memories, open events
        evaluate("engine_liveness", engine=vllm, up=True)
    for key in ("restart_loop", "prefix_cache_drop", "kv_saturated", "queue_growing"):
        rule_update(key=key, enabled=False)
    with django_assert_num_queries(4):  # a metrics tick also reads the operator's own rules (alerts/custom.py)
        evaluate("engine_polled", engine=vllm, reading={"kv_cache_usage": 0.99, "requests_waiting": 3})
    rule_update(key="kv_saturated", engine=fleet["llama"], params={"usage_pct": 50})
    with django_assert_num_queries(4):  # another engine's override is not read
        evaluate("engine_polled", engine=vllm, reading={"kv_cache_usage": 0.99, "requests_waiting": 3})
    with django_assert_num_queries(5):  # this engine's is, in one more query
        evaluate("engine_polled", engine=fleet["llama"], reading={"kv_cache_usage": 0.99, "requests_waiting": 3})


def test_a_recovery_first_seen_by_a_metrics_poll_still_resolves_engine_down(fleet):
    """The metrics poll may move Engine.status back to up before the next probe, which then
    reports changed=False: the probe's evaluation must still evaluate that first "up"."""
    import time

    from sparkops.alerts.evaluate import Memory, evaluate_liveness
    from sparkops.poller.liveness import Liveness

    vllm, memory, now = fleet["vllm"], Memory(), timezone.now()
    evaluate_liveness(Liveness(vllm, "down", "connection refused", False, now, changed=True), memory=memory)
    evaluate_liveness(Liveness(vllm, "down", "connection refused", True, now, changed=False), memory=memory)
    assert AlertEvent.objects.filter(rule="engine_down", subject="vllm-main", state__in=AlertEvent.OPEN_STATES).exists()
    memory.steady_at[vllm.pk] = time.monotonic()  # the 30 s steady re-check is not what resolves it
    evaluate_liveness(Liveness(vllm, "up", "", False, now, changed=False), memory=memory)
    assert not AlertEvent.objects.filter(
        rule="engine_down", subject="vllm-main", state__in=AlertEvent.OPEN_STATES
    ).exists()
