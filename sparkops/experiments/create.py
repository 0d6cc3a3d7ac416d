"""Creating an A/B experiment: the workload checked against the benchmark profile's bounds, the
flags under test named, both arms on one box, and the queued experiment with its 2 × REPS
alternated slots; queueing it (or continuing it after the operator's restart) on arm A's
box's worker. Nothing here runs a request: `runner` does."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.db import transaction

from sparkops.benchmarks.bounds import spec_problems
from sparkops.benchmarks.hashing import HASH_FIELDS, PROMPT_VERSION, stable_hash
from sparkops.benchmarks.spec import ENGINE_FIELDS, RunSpec, workload_fields
from sparkops.poller.fleet import require_reachable

from .models import MAX_REPS, MIN_REPS, PROBE_KINDS, Experiment, Slot
from .tasks import experiment_advance_task

WORKLOAD_DEFAULTS = {"depth": 1024, "output_tokens": 512, "mode": "cold", "concurrency": 1, "timeout_s": 600.0}


if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from dashboard.models import Engine


class ExperimentError(ValueError):
    """Bad input to an experiment: nothing was created or changed."""


def workload_hash(workload: dict[str, Any]) -> str:
    """The hash of what both arms are sent (the benchmark hash without the engine's fields)."""
    spec = RunSpec(engine_name="", engine_kind="", base_url="", **workload_fields(workload))
    data = {k: getattr(spec, k) for k in HASH_FIELDS if k not in ENGINE_FIELDS}
    data["prompt_version"] = PROMPT_VERSION
    return stable_hash(data)


def _check_workload(workload: dict[str, Any]) -> dict[str, Any]:
    w = {**WORKLOAD_DEFAULTS, **workload}
    unknown = sorted(set(workload) - set(RunSpec.__dataclass_fields__) - {"reps"})
    if unknown:
        raise ExperimentError(f"unknown workload field(s): {', '.join(unknown)}")
    # The profile's own bounds (one rule for bench run, sweeps, rate runs and experiments).
    problems = spec_problems(RunSpec(engine_name="", engine_kind="", base_url="", **{**workload_fields(w), "reps": 1}))
    if problems:
        raise ExperimentError("; ".join(problems))
    if w["depth"] > 0 and w["concurrency"] > 1 and not w.get("force"):
        raise ExperimentError("depth > 0 with concurrency > 1 needs force (it deadlocked an engine once)")
    w["reps"] = 1
    return w


def _flag_names(flags: Iterable[object] | None) -> list[str]:
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
    *,
    name: str | None,
    engine_a: Engine,
    engine_b: Engine,
    workload: dict[str, Any] | None = None,
    reps: int = MIN_REPS,
    flags: Iterable[object] = (),
    probe: str | None = "",
    user: User | None = None,
    seed: int = 18,
) -> Experiment:
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


def experiment_enqueue(*, experiment: Experiment) -> None:
    """Run (or, after the operator's restart, continue) EXPERIMENT on the worker of arm A's box,
    where its units can be read."""

    queue = experiment.engine_a.host.queue
    transaction.on_commit(lambda: experiment_advance_task.apply_async(args=[experiment.pk], queue=queue))


def experiment_continue(*, experiment: Experiment) -> Experiment:
    """The operator restarted the engine: queue the next slot, once (waiting → queued by a
    conditional update, so a second press queues nothing and no slot runs without its restart);
    `BoxUnreachable`, and it still waits, when arm A's box's worker stopped reporting."""
    with transaction.atomic():  # its state's refusal first; a box that cannot take it leaves it waiting
        claimed = Experiment.objects.filter(pk=experiment.pk, status=Experiment.Status.WAITING).update(
            status=Experiment.Status.QUEUED, reason=""
        )
        if claimed == 1:
            require_reachable(experiment.engine_a.host)
    experiment.refresh_from_db()
    if claimed != 1:
        raise ExperimentError(f"Experiment {experiment.pk} is {experiment.status}, not waiting for a restart.")
    experiment_enqueue(experiment=experiment)
    return experiment
