"""Why an engine is down, from what the collectors saw: the unit's state and the probe's error."""

from dataclasses import dataclass
from typing import Any, overload

from sparkops.collectors.systemd import UnitProps

# Restart= values under which systemd leaves a clean exit (status 0) alone.
NO_RESTART_ON_CLEAN_EXIT = {"no", "on-failure", "on-abnormal", "on-abort", "on-watchdog"}
# Causes that say systemd will not bring the engine back: worth a second notification if learned late.
DEFINITIVE = {
    "exit0_no_restart",
    "fatal_no_restart",
    "unit_failed",
    "start_limit_hit",
    "process_gone",
    "no_return_after_restart",
}


@dataclass
class Cause:
    key: str
    text: str
    coming_back: bool = False  # systemd is restarting it (auto-restart / activating)


@overload
def _int(value: Any) -> int | None: ...
@overload
def _int(value: Any, default: int) -> int: ...
def _int(value: Any, default: int | None = None) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def classify(
    *,
    unit: UnitProps | None,
    reason: str,
    activating_for_s: float = 0.0,
    activating_budget_s: float = 600.0,
    fatal: str = "",
    seen_up: bool = False,
    again: str = "",
) -> Cause:
    """Classify a failed liveness probe. UNIT: systemctl-show properties or None; REASON: the probe's error;
    FATAL: the last fatal journal line of the unit, if any. SEEN_UP: this very process (its
    InvocationID) answered before, so an active unit that stops answering hangs rather than
    lied about its readiness. AGAIN: the command that brings a failed unit back, as it would be
    pasted (`systemctl --user reset-failed NAME && systemctl --user start NAME`)."""
    if unit:
        cause = _from_unit(unit, reason, activating_for_s, activating_budget_s, fatal, seen_up, again)
        if cause:
            return cause
    return _from_probe(reason)


def _from_unit(
    unit: UnitProps,
    reason: str,
    activating_for_s: float,
    budget: float,
    fatal: str,
    seen_up: bool = False,
    again: str = "",
) -> Cause | None:
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
            f"`{again or 'systemctl reset-failed UNIT && systemctl start UNIT'}`",
        )
    if active == "failed" and unit.get("start_limit_line"):
        # A crash loop past the limit: Result stays the last run's, the journal says why it stays down.
        return Cause(
            "start_limit_hit",
            f"systemd gave up restarting it: the start limit was hit after {unit.get('NRestarts', '?')} "
            f"restarts (“start request repeated too quickly”; the last run failed with "
            f"Result={unit.get('Result') or '?'}, exit status {status if status is not None else '?'}), and it "
            f"stays down until someone runs `{again or 'systemctl reset-failed UNIT && systemctl start UNIT'}`",
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
    if active == "active" and seen_up:
        return Cause(
            "active_not_answering",
            f"the unit is active but its process, which answered before, stopped answering "
            f"({reason or 'no answer'}): it hangs",
        )
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


def _from_probe(reason: str) -> Cause:
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


def restart_cause(*, job_text: str, planned: bool, age_s: float, budget_s: float, fatal: str = "") -> Cause:
    """The cause of an engine whose unit runs a new process that does not answer yet: a restart
    someone asked for (PLANNED) or one systemd made after a crash, AGE_S into the start budget
    (the unit's TimeoutStartSec=). Within it the engine is coming back; past it, it did not."""
    if age_s > budget_s:
        return Cause(
            "no_return_after_restart",
            f"it did not come back after a restart ({job_text}): the new process has not answered in "
            f"{int(age_s)} s, past its {int(budget_s)} s start budget (TimeoutStartSec=)",
        )
    if planned:
        return Cause("restarting", f"restarting on request ({job_text})", coming_back=True)
    return Cause(
        "crashed_restarting",
        f"it crashed and systemd is restarting it ({job_text})" + (f"; the crash: {fatal}" if fatal else ""),
        coming_back=True,
    )
