"""A probe whose result changes fires `quality_regression` (warning); the next good run resolves it.

"Changes" means: this run is not good, and the last comparable run before it (same profile, same
parameter hash, done, untainted) was — or the alert is already open, so a lasting fault keeps its
alert instead of becoming the new normal. A probe that was never good (a tiny model that always
MISSes) is a result on its page, not a regression. The contract probe describes the engine and does
not alert."""

from __future__ import annotations

from typing import Any

from sparkops.alerts.models import AlertEvent

from .models import ProbeRun

RULE = "quality_regression"
SILENT_KINDS = ("contract",)


def last_comparable(run):
    return (
        ProbeRun.objects.filter(
            profile=run.profile,
            params_hash=run.params_hash,
            status=ProbeRun.Status.DONE,
            tainted=False,
            created_at__lt=run.created_at,
        )
        .exclude(pk=run.pk)
        .exclude(passed=None)
        .order_by("-created_at")
        .first()
    )


def changes(before, run) -> list[str]:
    """What got worse from BEFORE's result to RUN's, in words."""
    kind, old, new = run.kind, before.result if before else {}, run.result
    if kind == "needle":
        out = []
        old_cells = {(r["corpus"], d): c for r in old.get("rows", []) for d, c in r["cells"].items()}
        for row in new.get("rows", []):
            for depth, c in row["cells"].items():
                was = (old_cells.get((row["corpus"], depth)) or {}).get("verdict", "?")
                if c["verdict"] != "HIT" and not row["control"]:
                    out.append(f"{depth}%: {was} -> {c['text']}")
        return out
    return [f"{old.get('headline', '?')} -> {new.get('headline', '?')}"]


def _subject(run):
    return f"probe {run.profile.name}"


def quality_check(*, run):
    """Judge a finished profile run; fire or resolve the alert. Returns the detail dict."""
    if run.status != ProbeRun.Status.DONE or run.profile is None or run.tainted or run.passed is None:
        return {}
    if run.kind in SILENT_KINDS:
        return {}
    from sparkops.alerts.services import external_alert_fire, external_alert_resolve

    if run.passed:
        external_alert_resolve(rule=RULE, engine=run.engine, subject=_subject(run))
        return {}
    before = last_comparable(run)
    if not ((before is not None and before.passed) or _open(run)):
        detail: dict[str, Any] = {"skipped": "no earlier good run of this probe to compare with"}
        ProbeRun.objects.filter(pk=run.pk).update(regression_detail=detail)
        return detail
    what = changes(before, run)
    detail = {"before": before.pk if before else None, "changes": what}
    run.regression, run.regression_detail = True, detail
    run.save(update_fields=["regression", "regression_detail"])
    external_alert_fire(
        rule=RULE,
        severity="warning",
        engine=run.engine,
        subject=_subject(run),
        message=f"{run.profile.name} ({run.kind}) on {run.engine.name}: " + "; ".join(what),
        cause=f"probe run {run.pk}",
    )
    return detail


def _open(run):

    return AlertEvent.objects.filter(
        rule=RULE, engine=run.engine, subject=_subject(run), resolved_at__isnull=True
    ).exists()
