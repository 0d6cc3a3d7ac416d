"""Why an engine is down, from what the collectors saw: the unit's state and the probe's error."""

from dataclasses import dataclass

# Restart= values under which systemd leaves a clean exit (status 0) alone.
NO_RESTART_ON_CLEAN_EXIT = {"no", "on-failure", "on-abnormal", "on-abort", "on-watchdog"}
# Causes that say systemd will not bring the engine back: worth a second notification if learned late.
DEFINITIVE = {"exit0_no_restart", "fatal_no_restart", "unit_failed", "start_limit_hit", "process_gone"}


@dataclass
class Cause:
    key: str
    text: str
    coming_back: bool = False  # systemd is restarting it (auto-restart / activating)


def _int(value, default=None):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def classify(*, unit, reason, activating_for_s=0.0, activating_budget_s=600.0, fatal=""):
    """Classify a failed liveness probe. UNIT: systemctl-show properties or None; REASON: the probe's error;
    FATAL: the last fatal journal line of the unit, if any."""
    if unit:
        cause = _from_unit(unit, reason, activating_for_s, activating_budget_s, fatal)
        if cause:
            return cause
    return _from_probe(reason)


def _from_unit(unit, reason, activating_for_s, budget, fatal):
    active, sub = unit.get("ActiveState") or "", unit.get("SubState") or ""
    status, restart = _int(unit.get("ExecMainStatus")), unit.get("Restart") or ""
    code = str(unit.get("ExecMainCode") or "")
    if (
        active in ("inactive", "deactivating")
        and status == 0
        and code in ("", "0", "1", "exited")
        and restart in NO_RESTART_ON_CLEAN_EXIT
    ):
        return Cause(
            "exit0_no_restart",
            f"exited with status 0 while the unit has Restart={restart}, so systemd will not restart it",
        )
    if active == "failed" and unit.get("Result") == "start-limit-hit":
        return Cause(
            "start_limit_hit",
            f"systemd gave up restarting it: the start limit was hit after "
            f"{unit.get('NRestarts', '?')} restarts, and it stays down until someone runs "
            "`systemctl reset-failed` and starts it",
        )
    if active == "failed" and unit.get("start_limit_line"):
        # A crash loop past the limit: Result stays the last run's, the journal says why it stays down.
        return Cause(
            "start_limit_hit",
            f"systemd gave up restarting it: the start limit was hit after {unit.get('NRestarts', '?')} "
            f"restarts (“start request repeated too quickly”; the last run failed with "
            f"Result={unit.get('Result') or '?'}, exit status {status if status is not None else '?'}), and it "
            "stays down until someone runs `systemctl reset-failed` and starts it",
        )
    if active == "failed":
        result = unit.get("Result", "")
        return Cause(
            "unit_failed",
            f"the unit failed (Result={result or '?'}, exit status {status if status is not None else '?'})"
            + ("" if restart in ("always", "on-failure") else f"; Restart={restart or 'no'}"),
        )
    if active == "activating" and sub == "auto-restart":
        return Cause("restarting", "systemd is restarting the unit", coming_back=True)
    if active == "activating":
        if activating_for_s > budget:
            return Cause(
                "activating_too_long",
                f"the unit has been activating for {int(activating_for_s)} s, "
                f"longer than its {int(budget)} s budget: the readiness gate is stuck",
            )
        return Cause("starting", "the unit is starting", coming_back=True)
    if active == "active" and fatal and restart in NO_RESTART_ON_CLEAN_EXIT:
        # vLLM after an EngineCore death: the API fails at once and exits 0 seconds later.
        return Cause(
            "fatal_no_restart",
            f"the engine hit a fatal error and is shutting down; the unit has "
            f"Restart={restart}, so when it exits with status 0 (as vLLM does after its "
            "EngineCore dies) systemd will not restart it",
        )
    if active == "active" and _int(unit.get("MainPID"), 1) == 0:
        return Cause("process_gone", "the unit is active but its main process is gone")
    if active == "active":
        return Cause(
            "active_not_answering",
            f"the unit is active but the API is not answering ({reason or 'no answer'}): readiness lied",
        )
    if active in ("inactive", "deactivating"):
        return Cause(
            "process_gone",
            f"the unit is {active} (exit status {status if status is not None else '?'}) and its process is gone",
        )
    return None


def _from_probe(reason):
    text = (reason or "").lower()
    if "exited" in text:  # the worker saw the process exit (poller/exitwatch), no unit to ask
        return Cause("process_gone", f"its process is gone ({reason})")
    if "refused" in text:
        return Cause("connection_refused", f"connection refused: nothing listens on the engine's port ({reason})")
    if "timed out" in text or "timeout" in text:
        return Cause("timeout", f"the engine did not answer in time ({reason})")
    if "http 5" in text:
        return Cause("http_error", f"the engine answers with a server error ({reason})")
    return Cause("not_answering", f"the engine is not answering ({reason or 'no reason given'})")
