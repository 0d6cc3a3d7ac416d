"""Running an A/B experiment: the alternated repetitions, each slot's validity, the end (with
its verdict from `verdict`), and failing what a dead worker left running.

Each repetition of an arm is one benchmark Run of the workload with reps=1, executed by the
benchmarks' own `run_execute`: so every slot gets the whole per-run methodology (its own
session, the prompt calibrated to depth, a discarded warm-up request, pinned output, buckets,
checks, conditions and taint) right before its one measured request, and arm B never inherits
a warm engine from arm A's slot or the other way round. Slots alternate A, B, A, B … so a slow
drift of the box (heat, a neighbour) lands on both arms, not on whichever ran second.

Before every slot both arms' configuration snapshots are read afresh (sparkops/launch/observer
`observe_now`): a slot whose arm's snapshot is not the one that arm started the experiment with
is marked invalid (say, a drop-in that overrides every arm) and left out of the verdict."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db.models import Max, Q
from django.utils import timezone

from dashboard.livebus import GROUP_ALL, LiveEvent, publish_on_commit
from dashboard.models import ConfigSnapshot, Engine
from sparkops.benchmarks.models import Run
from sparkops.benchmarks.services import run_create, run_execute
from sparkops.benchmarks.spec import RunSpec, workload_fields
from sparkops.collectors import handrun
from sparkops.launch.changelog import diff as config_diff
from sparkops.launch.handrun import _same_address
from sparkops.launch.observer import observe_now
from sparkops.launch.snapshot import latest_snapshot, observe_engine
from sparkops.measured.services import STALE_MARGIN_S
from sparkops.probes.models import ProbeRun
from sparkops.probes.services import probe_run_create, probe_run_execute
from sparkops.probes.spec import ProbeSpec

from .models import Experiment, Slot
from .verdict import experiment_summary

log = logging.getLogger(__name__)


def _claim(experiment: Experiment) -> bool:
    moved = Experiment.objects.filter(
        pk=experiment.pk, status__in=[Experiment.Status.QUEUED, Experiment.Status.WAITING]
    ).update(status=Experiment.Status.RUNNING, reason="")
    experiment.refresh_from_db()
    if moved:
        _publish(experiment)
    return moved == 1


def _publish(experiment: Experiment) -> None:
    """An "experiment.progress" event: its page redraws (server-rendered) on each one."""
    statuses = list(experiment.slots.values_list("run__status", flat=True))
    done = sum(1 for s in statuses if s not in (None, Run.Status.QUEUED, Run.Status.RUNNING))
    payload = {"experiment": experiment.pk, "status": experiment.status, "done": done, "total": len(statuses)}
    publish_on_commit(GROUP_ALL, LiveEvent(type="experiment.progress", payload=payload))


def experiment_advance(
    *, experiment: Experiment, max_slots: int | None = None, trigger: str = Run.Trigger.MANUAL
) -> Experiment:
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


def _wait(experiment: Experiment, slot: Slot) -> Experiment:
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


def _observe(engine: Engine) -> ConfigSnapshot | None:
    try:
        if not engine.unit:
            return _observe_hand_run(engine)
        return observe_now(engine)
    except Exception:  # an unreadable unit leaves the slot unverified, it does not stop the experiment
        log.exception("configuration of %s not observed", engine.name)
        return None


def _observe_hand_run(engine: Engine) -> ConfigSnapshot | None:
    """A hand-run ENGINE (no unit) as of now: the process serving its address read this moment,
    as the poller's hand-run scan reads it (argv and environment from /proc). None when no
    process serves it now."""

    for proc in handrun.scan():
        if _same_address(engine.url, proc["host"], proc["port"]):
            pid = proc["pid"]
            cmdline, environ = f"/proc/{pid}/cmdline", f"/proc/{pid}/environ"
            cfg = {
                "environment": proc["environ"],
                "environment_origins": dict.fromkeys(proc["environ"], environ),
                "exec_start": {"argv": proc["argv"], "origins": [cmdline] * len(proc["argv"]), "file": cmdline},
            }
            process = {"pid": pid, "cgroup": proc["cgroup"], "scope": proc["unit"]}
            # No account: the engine's last one is carried. An unchanged configuration stores no new
            # snapshot, so the arm's snapshot is the latest either way.
            observe_engine(engine, cfg, launch="hand-run", process=process)
            return latest_snapshot(engine)
    return None


def _run_slot(experiment: Experiment, slot: Slot, trigger: str) -> None:
    a = _observe(experiment.engine_a)
    b = a if experiment.engine_b_id == experiment.engine_a_id else _observe(experiment.engine_b)
    slot.snapshot_a, slot.snapshot_b = a, b
    engine = experiment.engine(slot.arm)
    engine.refresh_from_db()
    spec = RunSpec(
        engine_name=engine.name,
        engine_kind=engine.kind,
        base_url=engine.base_url,
        **workload_fields(experiment.workload),
    )
    slot.run = run_create(engine=engine, spec=spec, trigger=trigger, user=experiment.created_by)
    slot.save(update_fields=["snapshot_a", "snapshot_b", "run"])
    run_execute(run=slot.run)
    if experiment.probe and not experiment.slots.filter(arm=slot.arm, order__gt=slot.order).exists():
        _probe_arm(experiment, slot.arm, engine)  # while the engine still runs this arm's configuration
    _publish(experiment)


def _probe_arm(experiment: Experiment, arm: str, engine: Engine) -> None:
    """One run of the experiment's quality probe on ARM, with the workload's sampling and thinking."""

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


def experiment_finish(*, experiment: Experiment) -> Experiment:
    """After the last slot: a last look at both arms' configurations, validity, the verdict."""
    if experiment.mode == Experiment.Mode.SIDE_BY_SIDE:
        final = {"A": _observe(experiment.engine_a), "B": _observe(experiment.engine_b)}
    else:  # one engine: what runs now is the last slot's arm (it has 2 × reps ≥ 6 slots)
        last = experiment.slots.order_by("-order").first()
        final = {last.arm: _observe(experiment.engine_a)}  # type: ignore[union-attr]
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


def mark_validity(*, experiment: Experiment, final: dict[str, ConfigSnapshot | None] | None = None) -> list[Slot]:
    """A slot is invalid when its arm's snapshot is not the one the arm began with (FINAL: the
    snapshots read after the last slot, which judge each arm's last slot too)."""
    baseline: dict[str, ConfigSnapshot | None] = {}
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


def _change_text(before: ConfigSnapshot, after: ConfigSnapshot) -> str:
    lines = config_diff(before.data or {}, after.data or {})
    return (
        "; ".join(f"{n} {o} → {v}" + (f" ({origin})" if origin else "") for n, o, v, origin in lines) or "the account"
    )


def experiments_sweep_stale(*, margin_s: float | None = None) -> int:
    """Fail experiments left "running" by a worker that died: none of their runs (nor quality
    probe runs) is queued or running (a dead worker's run is failed by bench.sweep_stale) and
    none finished for MARGIN_S. What ran is kept, with the verdict of what ran."""

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
