"""A/B experiments: create, run the alternated repetitions, verify the variant, give the verdict.

Each repetition of an arm is one benchmark Run of the workload with reps=1, executed by the
benchmarks' own `run_execute`: so every slot gets the whole per-run methodology (its own
session, the prompt calibrated to depth, a discarded warm-up request, pinned output, buckets,
checks, conditions and taint) right before its one measured request, and arm B never inherits
a warm engine from arm A's slot or the other way round. Slots alternate A, B, A, B … so a slow
drift of the box (heat, a neighbour) lands on both arms, not on whichever ran second.

Before every slot both arms' configuration snapshots are read afresh (services/launchconfig
`observe_now`): a slot whose arm's snapshot is not the one that arm started the experiment with
is marked invalid (the drop-in that overrode every arm) and left out of the verdict."""

from __future__ import annotations

import logging
import statistics

from django.db import transaction
from django.utils import timezone

from dashboard.benchmarks.bounds import spec_problems
from dashboard.benchmarks.cells import cell_figures
from dashboard.benchmarks.hashing import HASH_FIELDS, PROMPT_VERSION, stable_hash
from dashboard.benchmarks.models import Run
from dashboard.benchmarks.services import run_create, run_execute
from dashboard.benchmarks.spec import RunSpec
from dashboard.live.events import GROUP_ALL, LiveEvent, publish_on_commit
from dashboard.services import launchconfig

from . import stats
from .models import MAX_REPS, MIN_REPS, PROBE_KINDS, Experiment, Slot

log = logging.getLogger(__name__)
ENGINE_FIELDS = ("engine_name", "engine_kind", "base_url", "model")
WORKLOAD_DEFAULTS = {"depth": 1024, "output_tokens": 512, "mode": "cold", "concurrency": 1, "timeout_s": 600.0}


class ExperimentError(ValueError):
    """Bad input to an experiment: nothing was created or changed."""


# --- creating -----------------------------------------------------------------------------------


def workload_hash(workload):
    """The hash of what both arms are sent (the benchmark hash without the engine's fields)."""
    spec = RunSpec(engine_name="", engine_kind="", base_url="", **_spec_fields(workload))
    data = {k: getattr(spec, k) for k in HASH_FIELDS if k not in ENGINE_FIELDS}
    data["prompt_version"] = PROMPT_VERSION
    return stable_hash(data)


def _spec_fields(workload):
    return {k: v for k, v in workload.items() if k in RunSpec.__dataclass_fields__ and k not in ENGINE_FIELDS}


def _check_workload(workload):
    w = {**WORKLOAD_DEFAULTS, **workload}
    unknown = sorted(set(workload) - set(RunSpec.__dataclass_fields__) - {"reps"})
    if unknown:
        raise ExperimentError(f"unknown workload field(s): {', '.join(unknown)}")
    # The profile's own bounds (one rule for bench run, sweeps, rate runs and experiments).
    problems = spec_problems(RunSpec(engine_name="", engine_kind="", base_url="", **{**_spec_fields(w), "reps": 1}))
    if problems:
        raise ExperimentError("; ".join(problems))
    if w["depth"] > 0 and w["concurrency"] > 1 and not w.get("force"):
        raise ExperimentError("depth > 0 with concurrency > 1 needs force (it deadlocked an engine once)")
    w["reps"] = 1
    return w


def _flag_names(flags):
    names = []
    for raw in flags or ():
        name = str(raw).strip()
        if not name:
            continue
        if not name.startswith("-") and not name.endswith("="):
            raise ExperimentError(
                f"{name!r} is not a launch flag (like --speculative-config) or a setting (like Restart=)"
            )
        names.append(name)
    return sorted(set(names))


def experiment_create(
    *, name, engine_a, engine_b, workload=None, reps=MIN_REPS, flags=(), probe="", user=None, seed=18
):
    """A queued experiment and its 2 × REPS slots in the order A, B, A, B …; the same engine for
    both arms is the restart mode (the operator restarts it between slots when the page asks)."""
    name = (name or "").strip()
    if not name:
        raise ExperimentError("an experiment needs a name (what it decides)")
    if not MIN_REPS <= reps <= MAX_REPS:
        raise ExperimentError(f"repetitions per arm must be {MIN_REPS}–{MAX_REPS} (at least three), got {reps}")
    for arm, engine in (("A", engine_a), ("B", engine_b)):
        if engine.retired_at is not None:
            raise ExperimentError(f"arm {arm}: engine {engine.name} is retired")
    if engine_a.host_id != engine_b.host_id:
        raise ExperimentError(
            f"arm A ({engine_a.name}) and arm B ({engine_b.name}) are on different boxes: the arms' units are read "
            "on one box's worker, and two boxes differ in more than the flags under test"
        )
    w = _check_workload(dict(workload or {}))
    if probe and probe not in PROBE_KINDS:
        raise ExperimentError(f"the quality probe is one of {', '.join(PROBE_KINDS)}, got {probe!r}")
    with transaction.atomic():
        experiment = Experiment.objects.create(
            name=name[:120],
            engine_a=engine_a,
            engine_b=engine_b,
            mode=Experiment.Mode.RESTART if engine_a.pk == engine_b.pk else Experiment.Mode.SIDE_BY_SIDE,
            flags=_flag_names(flags),
            workload=w,
            workload_hash=workload_hash(w),
            reps=reps,
            probe=probe or "",
            seed=seed,
            created_by=user,
        )
        Slot.objects.bulk_create(Slot(experiment=experiment, order=i, arm="AB"[i % 2]) for i in range(2 * reps))
    return experiment


def experiment_enqueue(*, experiment):
    """Run (or, after the operator's restart, continue) EXPERIMENT on the worker of arm A's box,
    where its units can be read."""
    from .tasks import experiment_advance_task

    queue = experiment.engine_a.host.queue
    transaction.on_commit(lambda: experiment_advance_task.apply_async(args=[experiment.pk], queue=queue))


def experiment_continue(*, experiment):
    """The operator restarted the engine: queue the next slot, once (waiting → queued by a
    conditional update, so a second press queues nothing and no slot runs without its restart)."""
    if (
        Experiment.objects.filter(pk=experiment.pk, status=Experiment.Status.WAITING).update(
            status=Experiment.Status.QUEUED, reason=""
        )
        != 1
    ):
        experiment.refresh_from_db()
        raise ExperimentError(f"Experiment {experiment.pk} is {experiment.status}, not waiting for a restart.")
    experiment.refresh_from_db()
    experiment_enqueue(experiment=experiment)
    return experiment


# --- running ------------------------------------------------------------------------------------


def _claim(experiment):
    moved = Experiment.objects.filter(
        pk=experiment.pk, status__in=[Experiment.Status.QUEUED, Experiment.Status.WAITING]
    ).update(status=Experiment.Status.RUNNING, reason="")
    experiment.refresh_from_db()
    if moved:
        _publish(experiment)
    return moved == 1


def _publish(experiment):
    """An "experiment.progress" event: its page redraws (server-rendered) on each one."""
    statuses = list(experiment.slots.values_list("run__status", flat=True))
    done = sum(1 for s in statuses if s not in (None, Run.Status.QUEUED, Run.Status.RUNNING))
    payload = {"experiment": experiment.pk, "status": experiment.status, "done": done, "total": len(statuses)}
    publish_on_commit(GROUP_ALL, LiveEvent(type="experiment.progress", payload=payload))


def experiment_advance(*, experiment, max_slots=None, trigger=Run.Trigger.MANUAL):
    """Run the next slots in order. Side by side: all of them (or MAX_SLOTS). Restart mode: one,
    then wait for the operator to restart the engine into the next slot's arm. Never raises for
    engine faults: a failed run is kept in its slot with its reason."""
    if not _claim(experiment):
        return experiment
    pending = list(experiment.slots.filter(run__isnull=True).order_by("order"))
    if experiment.mode == Experiment.Mode.RESTART:
        max_slots = 1
    for done, slot in enumerate(pending):
        if max_slots is not None and done >= max_slots:
            return _wait(experiment, slot)
        _run_slot(experiment, slot, trigger)
    return experiment_finish(experiment=experiment)


def _wait(experiment, slot):
    engine = experiment.engine(slot.arm)
    if experiment.mode == Experiment.Mode.RESTART:
        flags = ", ".join(experiment.flags) or "the flags under test"
        experiment.reason = (
            f"Restart {engine.name} into arm {slot.arm}'s configuration ({flags}), wait until it answers, "
            f"then continue: repetition {slot.order + 1} of {2 * experiment.reps} is arm {slot.arm}."
        )
    else:
        experiment.reason = f"Paused before repetition {slot.order + 1} (arm {slot.arm})."
    experiment.status = Experiment.Status.WAITING
    experiment.save(update_fields=["status", "reason"])
    _publish(experiment)
    return experiment


def _observe(engine):
    try:
        if not engine.unit:
            return _observe_hand_run(engine)
        return launchconfig.observe_now(engine)
    except Exception:  # an unreadable unit leaves the slot unverified, it does not stop the experiment
        log.exception("configuration of %s not observed", engine.name)
        return None


def _observe_hand_run(engine):
    """A hand-run ENGINE (no unit) as of now: the process serving its address read this moment,
    as the poller's hand-run scan reads it (argv and environment from /proc). None when no
    process serves it now. Before, every hand-run arm read as "has no configuration snapshot"."""
    from dashboard.collectors import handrun

    for proc in handrun.scan():
        if launchconfig._same_address(engine.url, proc["host"], proc["port"]):
            pid = proc["pid"]
            cmdline, environ = f"/proc/{pid}/cmdline", f"/proc/{pid}/environ"
            cfg = {
                "environment": proc["environ"],
                "environment_origins": dict.fromkeys(proc["environ"], environ),
                "exec_start": {"argv": proc["argv"], "origins": [cmdline] * len(proc["argv"]), "file": cmdline},
            }
            process = {"pid": pid, "cgroup": proc["cgroup"], "scope": proc["unit"]}
            launchconfig.observe_engine(engine, cfg, launch="hand-run", process=process)  # account: the last one
            return launchconfig.latest_snapshot(engine)
    return None


def _run_slot(experiment, slot, trigger):
    a = _observe(experiment.engine_a)
    b = a if experiment.engine_b_id == experiment.engine_a_id else _observe(experiment.engine_b)
    slot.snapshot_a, slot.snapshot_b = a, b
    engine = experiment.engine(slot.arm)
    engine.refresh_from_db()
    spec = RunSpec(
        engine_name=engine.name, engine_kind=engine.kind, base_url=engine.base_url, **_spec_fields(experiment.workload)
    )
    slot.run = run_create(engine=engine, spec=spec, trigger=trigger, user=experiment.created_by)
    slot.save(update_fields=["snapshot_a", "snapshot_b", "run"])
    run_execute(run=slot.run)
    if experiment.probe and not experiment.slots.filter(arm=slot.arm, order__gt=slot.order).exists():
        _probe_arm(experiment, slot.arm, engine)  # while the engine still runs this arm's configuration
    _publish(experiment)


def _probe_arm(experiment, arm, engine):
    """One run of the experiment's quality probe on ARM, with the workload's sampling and thinking."""
    from dashboard.probes.models import ProbeRun
    from dashboard.probes.services import probe_run_create, probe_run_execute
    from dashboard.probes.spec import ProbeSpec

    w = experiment.workload
    spec = ProbeSpec(
        engine_name=engine.name,
        engine_kind=engine.kind,
        base_url=engine.base_url,
        kind=experiment.probe,
        sampling=w.get("sampling", "server"),
        sampling_params=dict(w.get("sampling_params") or {}),
        thinking=w.get("thinking", "server"),
        timeout_s=float(w.get("timeout_s", 600.0)),
    )
    run = probe_run_create(engine=engine, spec=spec, trigger=ProbeRun.Trigger.MANUAL, user=experiment.created_by)
    setattr(experiment, f"probe_run_{arm.lower()}", run)
    experiment.save(update_fields=[f"probe_run_{arm.lower()}"])
    probe_run_execute(run=run)


def experiment_finish(*, experiment):
    """After the last slot: a last look at both arms' configurations, validity, the verdict."""
    if experiment.mode == Experiment.Mode.SIDE_BY_SIDE:
        final = {"A": _observe(experiment.engine_a), "B": _observe(experiment.engine_b)}
    else:  # one engine: what runs now is the last slot's arm
        final = {experiment.slots.order_by("-order").first().arm: _observe(experiment.engine_a)}
    mark_validity(experiment=experiment, final=final)
    runs = Run.objects.filter(experiment_slot__experiment=experiment)
    failed = runs.exclude(status=Run.Status.DONE).count()
    experiment.verdict = experiment_summary(experiment=experiment)
    experiment.status = Experiment.Status.DONE
    experiment.reason = (
        f"{failed} of {runs.count()} repetitions failed (kept, left out of the verdict)" if failed else ""
    )
    if not experiment.verdict["enough"]:
        experiment.status = Experiment.Status.FAILED
        experiment.reason = (experiment.reason + "; " if experiment.reason else "") + experiment.verdict[
            "enough_reason"
        ]
    experiment.finished_at = timezone.now()
    experiment.save(update_fields=["verdict", "status", "reason", "finished_at"])
    _publish(experiment)
    return experiment


def mark_validity(*, experiment, final=None):
    """A slot is invalid when its arm's snapshot is not the one the arm began with (FINAL: the
    snapshots read after the last slot, which judge each arm's last slot too)."""
    baseline = {}
    slots = list(experiment.slots.select_related("snapshot_a", "snapshot_b").order_by("order"))
    for slot in slots:
        snap = slot.snapshot()
        if slot.run_id is None:
            continue
        base = baseline.setdefault(slot.arm, snap)
        slot.valid, slot.invalid_reason = True, ""
        if base is not None and snap is not None and snap.hash != base.hash:
            slot.valid = False
            slot.invalid_reason = (
                f"arm {slot.arm}'s configuration changed mid-experiment: snapshot {snap.pk} "
                f"(was {base.pk}): " + _change_text(base, snap)
            )
    for arm, snap in (final or {}).items():
        ran = [s for s in slots if s.arm == arm and s.run_id is not None]
        base = baseline.get(arm)
        if ran and ran[-1].valid and base is not None and snap is not None and snap.hash != base.hash:
            ran[-1].valid = False
            ran[-1].invalid_reason = (
                f"arm {arm}'s configuration had changed by the end of the experiment (snapshot {snap.pk}, "
                f"was {base.pk}), during or after this repetition: " + _change_text(base, snap)
            )
    Slot.objects.bulk_update(slots, ["valid", "invalid_reason"])
    return slots


def _change_text(before, after):
    lines = launchconfig.diff(before.data or {}, after.data or {})
    return (
        "; ".join(f"{n} {o} → {v}" + (f" ({origin})" if origin else "") for n, o, v, origin in lines) or "the account"
    )


# --- verify the variant ---------------------------------------------------------------------------


def _baselines(experiment):
    out = {}
    for slot in experiment.slots.select_related("snapshot_a", "snapshot_b").order_by("order"):
        if slot.arm not in out and slot.run_id is not None:
            out[slot.arm] = slot.snapshot()
    return out


def _port(engine):
    from urllib.parse import urlsplit

    try:
        return urlsplit(engine.url).port
    except ValueError:
        return None


def _only_the_address(experiment, a_value, b_value):
    """Whether two side-by-side units' values differ only by each one's own port or name (two
    units cannot listen on one port: that difference is the setup, not the variant)."""
    pa, pb = _port(experiment.engine_a), _port(experiment.engine_b)
    if pa is None or pb is None:
        return False
    b_as_a = b_value.replace(str(pb), str(pa)).replace(experiment.engine_b.name, experiment.engine_a.name)
    return b_as_a == a_value


def arm_difference(*, experiment):
    """The configuration difference between the arms' first snapshots, and whether it is exactly
    the flags the experiment names: {lines, names, expected, ignored, warnings, exact}."""
    snaps = _baselines(experiment)
    expected = list(experiment.flags or [])
    warnings = []
    for arm in "AB":
        if arm in snaps and snaps[arm] is None:
            warnings.append(
                f"Arm {arm} ({experiment.engine(arm).name}) has no configuration snapshot SparkOps could read "
                "(its unit could not be read, or no process serves a hand-run engine): the variant is not verified."
            )
    a, b = snaps.get("A"), snaps.get("B")
    if a is None or b is None:
        return {"lines": [], "names": [], "expected": expected, "ignored": [], "warnings": warnings, "exact": False}
    lines, ignored = [], []
    for n, o, v, origin in launchconfig.diff(a.data or {}, b.data or {}):
        if experiment.mode == Experiment.Mode.SIDE_BY_SIDE and _only_the_address(experiment, o, v):
            ignored.append(n)
        else:
            lines.append({"name": n, "a": o, "b": v, "origin": origin})
    names = sorted({line["name"] for line in lines})
    if not lines:
        warnings.append("The arms' configurations are the same: this compares an engine with itself.")
    elif names != sorted(expected):
        extra = [n for n in names if n not in expected]
        missing = [n for n in expected if n not in names]
        parts = []
        if extra:
            parts.append("they also differ in " + ", ".join(extra))
        if missing:
            parts.append("they do not differ in " + ", ".join(missing))
        named = ", ".join(expected) or "no flags"
        warnings.append(
            f"The arms do not differ by exactly the flags this experiment names ({named}): {'; '.join(parts)}."
        )
    return {
        "lines": lines,
        "names": names,
        "expected": expected,
        "ignored": ignored,
        "warnings": warnings,
        "exact": bool(lines) and names == sorted(expected),
    }


# --- the figures ------------------------------------------------------------------------------------


def _figure(run, key):
    return ((run.stats or {}).get(key) or {}).get("median")


def _quality(slots, probe_run):
    """Pass count (repetitions whose run finished with no failed check, of those that ran) and the
    quality probe's result when the experiment has one."""
    ran = [s for s in slots if s.run is not None and s.run.status not in (Run.Status.QUEUED, Run.Status.RUNNING)]
    passed = [s for s in ran if s.run.status == Run.Status.DONE and not any(c.get("ok") is False for c in s.run.checks)]
    out = {"passed": len(passed), "of": len(ran), "what": "repetitions that finished with every check passed"}
    if probe_run is not None:
        probe_run.refresh_from_db()
        out["probe"] = {
            "run": probe_run.pk,
            "kind": probe_run.kind,
            "status": probe_run.status,
            "passed": probe_run.passed,
            "headline": probe_run.headline or probe_run.reason,
        }
    return out


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def experiment_summary(*, experiment):
    """Everything the page and `sparkops bench ab --json` show: arms, difference, slots, verdict."""
    slots = list(
        experiment.slots.select_related("run", "snapshot_a", "snapshot_b").prefetch_related("run__repetitions")
    )
    counted = {
        arm: [s for s in slots if s.arm == arm and s.valid and s.run and s.run.status == Run.Status.DONE]
        for arm in "AB"
    }
    # Each repetition read as a sweep cell (benchmarks/cells.py): aggregate and per-stream decode, TTFT.
    cells = {s.pk: cell_figures(s.run.repetitions.all()) for arm in "AB" for s in counted[arm]}
    values = {
        "decode_tokens_per_s": {a: [cells[s.pk]["per_stream_decode_tokens_per_s"] for s in counted[a]] for a in "AB"},
        "ttft_ms": {a: [cells[s.pk]["ttft_ms"] for s in counted[a]] for a in "AB"},
        "total_ms": {a: [_figure(s.run, "total_ms") for s in counted[a]] for a in "AB"},
    }
    figures = stats.verdict(values, seed=experiment.seed)
    arms = {}
    for arm in "AB":
        arm_slots = [s for s in slots if s.arm == arm]
        arms[arm] = {
            "engine": experiment.engine(arm).name,
            "aggregate_decode_tokens_per_s": _median(
                cells[s.pk]["aggregate_decode_tokens_per_s"] for s in counted[arm]
            ),
            "per_stream_decode_tokens_per_s": figures["decode_tokens_per_s"]["median_" + arm.lower()],
            "ttft_ms": figures["ttft_ms"]["median_" + arm.lower()],
            "total_ms": figures["total_ms"]["median_" + arm.lower()],
            "reps_counted": len(counted[arm]),
            "reps_invalid": sum(1 for s in arm_slots if not s.valid),
            "reps_total": len(arm_slots),
            "quality": _quality(arm_slots, experiment.probe_run(arm)),
        }
    enough = all(len(counted[arm]) >= MIN_REPS for arm in "AB")
    return {
        "experiment": experiment.pk,
        "name": experiment.name,
        "mode": experiment.mode,
        "workload": experiment.workload,
        "workload_hash": experiment.workload_hash,
        "flags": experiment.flags,
        "arms": arms,
        "difference": arm_difference(experiment=experiment),
        "figures": figures,
        "ratio": {k: f["ratio"] for k, f in figures.items()},
        "ci_low": {k: f["ci_low"] for k, f in figures.items()},
        "ci_high": {k: f["ci_high"] for k, f in figures.items()},
        "verdict": {k: f["verdict"] for k, f in figures.items()},
        "method": method_text(experiment),
        "enough": enough,
        "enough_reason": "" if enough else f"fewer than {MIN_REPS} valid, finished repetitions in an arm: no verdict",
        "slots": [_slot_row(s) for s in slots],
    }


def method_text(experiment):
    return (
        f"Ratio of medians B / A over each arm's valid repetitions; 95 % percentile bootstrap interval "
        f"({stats.RESAMPLES} resamples, seed {experiment.seed}), widened by {stats.RESOLUTION:.1%} each side for the "
        f"harness's resolution; a word only when the interval excludes 1 "
        f"and the ratio is at least {stats.MIN_EFFECT:.0%} from it. Lower is better for TTFT and total time."
    )


def _slot_row(slot):
    run = slot.run
    snap = slot.snapshot()
    return {
        "order": slot.order + 1,
        "arm": slot.arm,
        "run": run.pk if run else None,
        "status": run.status if run else "pending",
        "reason": run.reason if run else "",
        "tainted": bool(run and run.tainted),
        "decode_tokens_per_s": _figure(run, "decode_tokens_per_s") if run else None,
        "ttft_ms": _figure(run, "ttft_ms") if run else None,
        "total_ms": _figure(run, "total_ms") if run else None,
        "snapshot": snap.pk if snap else None,
        "snapshot_hash": snap.hash[:10] if snap else None,
        "valid": slot.valid,
        "invalid_reason": slot.invalid_reason,
    }


# --- the change log ---------------------------------------------------------------------------------


def _fmt(value, digits=3):
    return "—" if value is None else f"{value:.{digits}f}"


def experiment_record(*, experiment, user=None):
    """ "Record the verdict": a change-log `measurement` entry with the table, the method and
    evidence (the experiment's page and every counted run). Once per experiment."""
    from dashboard.changelog.grammar import EvidenceLine
    from dashboard.changelog.services import entry_create

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


def experiments_sweep_stale(*, margin_s=None):
    """Fail experiments left "running" by a worker that died: none of their runs (nor quality
    probe runs) is queued or running (a dead worker's run is failed by bench.sweep_stale) and
    none finished for MARGIN_S. What ran is kept, with the verdict of what ran."""
    from datetime import timedelta

    from django.db.models import Max, Q

    from dashboard.benchmarks.schedule import STALE_MARGIN_S

    cutoff = timezone.now() - timedelta(seconds=STALE_MARGIN_S if margin_s is None else margin_s)
    busy = [Run.Status.QUEUED, Run.Status.RUNNING]  # a probe run's statuses are the same words
    active = Q(slots__run__status__in=busy) | Q(probe_run_a__status__in=busy) | Q(probe_run_b__status__in=busy)
    candidates = (
        Experiment.objects.filter(status=Experiment.Status.RUNNING)
        .exclude(active)
        .annotate(last=Max("slots__run__finished_at"))
        .filter(Q(last__lt=cutoff) | Q(last__isnull=True, created_at__lt=cutoff))
    )
    failed = 0
    for experiment in candidates:
        ran = experiment.slots.filter(run__isnull=False).count()
        reason = f"the worker stopped mid-experiment: {ran} of {2 * experiment.reps} repetitions ran (kept)"
        if Experiment.objects.filter(pk=experiment.pk, status=Experiment.Status.RUNNING).update(
            status=Experiment.Status.FAILED, reason=reason, finished_at=timezone.now()
        ):
            experiment.refresh_from_db()
            mark_validity(experiment=experiment)
            experiment.verdict = experiment_summary(experiment=experiment)
            experiment.save(update_fields=["verdict"])
            _publish(experiment)
            failed += 1
    return failed
