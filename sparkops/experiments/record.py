"""Recording an experiment's verdict in the change log: one `measurement` entry with the figures'
table, the difference between the arms, the quality of each, the method, and evidence (the
experiment's page and every counted run)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from sparkops.changelog.grammar import EvidenceLine
from sparkops.changelog.services import entry_create

from .create import ExperimentError
from .models import Experiment

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from sparkops.changelog.models import Entry


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def experiment_record(*, experiment: Experiment, user: User | None = None) -> Entry:
    """ "Record the verdict": a change-log `measurement` entry with the table, the method and
    evidence (the experiment's page and every counted run). Once per experiment."""

    if experiment.status != Experiment.Status.DONE:
        raise ExperimentError(f"experiment {experiment.pk} is {experiment.status}: only a finished one has a verdict")
    if experiment.entry_id:
        raise ExperimentError(
            f"the verdict of experiment {experiment.pk} is already change-log entry {experiment.entry_id}"
        )
    v = experiment.verdict
    decode = v["figures"]["decode_tokens_per_s"]
    a, b = v["arms"]["A"]["engine"], v["arms"]["B"]["engine"]
    band = f"{_fmt(decode['ratio'], 2)}× [{_fmt(decode['ci_low'], 2)}–{_fmt(decode['ci_high'], 2)}]"
    if decode["verdict"] in ("faster", "slower"):
        title = f"A/B {experiment.name}: B ({b}) {decode['verdict']} than A ({a}) on decode, {band}"
    else:
        title = f"A/B {experiment.name}: B ({b}) vs A ({a}) on decode: {decode['verdict']}, {band}"
    body = [
        f"Experiment {experiment.pk} ({experiment.get_mode_display()}), workload {experiment.workload_hash} "
        f"(depth {experiment.workload.get('depth')}, {experiment.workload.get('output_tokens')} output tokens, "
        f"{experiment.workload.get('mode')}), {experiment.reps} repetitions per arm alternated A, B, A, B.",
        "",
        "| figure | A median | B median | B / A | 95 % interval | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for f in v["figures"].values():
        body.append(
            f"| {f['label']} | {_fmt(f['median_a'], 1)} | {_fmt(f['median_b'], 1)} | {_fmt(f['ratio'])} | "
            f"{_fmt(f['ci_low'])}–{_fmt(f['ci_high'])} | {f['verdict']} |"
        )
    diff = v["difference"]
    body += [
        "",
        "Difference between the arms: "
        + ("; ".join(f"{d['name']} {d['a']} → {d['b']}" for d in diff["lines"]) or "none seen"),
    ]
    body += [f"Warning: {w}" for w in diff["warnings"]]
    invalid = [s for s in v["slots"] if not s["valid"]]
    if invalid:
        body.append(f"Left out as invalid: repetitions {', '.join(str(s['order']) for s in invalid)}.")
    for arm in "AB":
        q = v["arms"][arm]["quality"]
        line = f"Quality, arm {arm}: {q['passed']} of {q['of']} {q['what']}"
        if q.get("probe"):
            p = q["probe"]
            verdict = {True: "passed", False: "FAILED", None: p["status"]}[p["passed"]]
            line += f"; {p['kind']} probe (probe run {p['run']}): {verdict}, {p['headline']}"
        body.append(line + ".")
    body += ["", v["method"]]
    evidence = [EvidenceLine(kind="url", url=f"/experiments/{experiment.pk}/")]
    evidence += [EvidenceLine(kind="benchmark_run", ref_id=s["run"]) for s in v["slots"] if s["run"] and s["valid"]]
    with transaction.atomic():
        entry = entry_create(
            author=user,
            effective_at=experiment.finished_at or timezone.now(),
            title=title[:200],
            kind="measurement",
            engines=list({experiment.engine_a, experiment.engine_b}),
            body_md="\n".join(body),
            evidence=evidence,
        )
        experiment.entry_id = entry.pk
        experiment.save(update_fields=["entry_id"])
    return entry
