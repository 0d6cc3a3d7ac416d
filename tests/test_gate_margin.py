"""The audit and `unit fix` hold a readiness budget to TimeoutStartSec with at least the gate's own
start-up margin (waitready.START_MARGIN_S), whatever the audit's threshold: below it the gate
itself refuses the start (issue 47 item 5)."""

from __future__ import annotations

from types import SimpleNamespace

from sparkops.audit.checks import CHECKS
from sparkops.gate.waitready import START_MARGIN_S


def _unit(budget, timeout="30s"):
    argv = ["/opt/sparkops/bin/sparkops", "wait-ready", "--url", "http://127.0.0.1:8000", "--budget", str(budget)]
    return {"unit": {"unit": "e.service", "timeout_start_usec": timeout, "exec_start_post": [{"argv": argv}]}}


def test_a_budget_inside_the_gates_margin_fails_the_audit_even_with_a_zero_margin_threshold():
    engine = SimpleNamespace(name="e", kind="vllm", url="http://127.0.0.1:8000", unit="e.service")
    check = CHECKS["readiness_budget"]
    status, evidence, _fix = check.engine(engine, _unit(29.9), {"margin_s": 0})
    assert status == "fail" and f"margin {START_MARGIN_S:g} s is past" in evidence, evidence
    assert check.engine(engine, _unit(30 - START_MARGIN_S), {"margin_s": 0})[0] == "pass"
