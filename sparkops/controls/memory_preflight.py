"""The memory preflight of `sparkops launch`: this engine's planned share of the box's memory (its
flags, vLLM's default, --share or the planner's figure) plus the shares of the box's running
engines, against 1 − the audit's headroom. The launch path runs it under the box's start lock, so
two launches never both fit into the same free memory."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from sparkops.audit.checks import memory_share
from sparkops.audit.run import snapshots_of
from sparkops.collectors import handrun
from sparkops.planner.engine_model import PlanError

from .launchplan import Refused

if TYPE_CHECKING:
    from dashboard.models import Engine, Host, Launch

    from .launchplan import Plan

Running = list[tuple[str, "float | None", str]]  # (engine name, share or None, what it rests on)
VLLM_DEFAULT_SHARE = 0.9  # vLLM's own default --gpu-memory-utilization
GIB = 1024**3


# --- 3. the memory preflight ----------------------------------------------------------------


def planned_share(plan: Plan, engine: Engine | None, share_flag: float | None) -> tuple[float | None, str]:
    """(this engine's share of the box's memory or None, what it rests on)."""
    if plan.kind == "vllm":
        raw = plan.flags.get("--gpu-memory-utilization")
        if raw is None:
            return VLLM_DEFAULT_SHARE, f"vLLM's default --gpu-memory-utilization {VLLM_DEFAULT_SHARE:g}"
        return _fraction(raw, "--gpu-memory-utilization"), f"--gpu-memory-utilization {raw}"
    if plan.kind == "sglang":
        raw = plan.flags.get("--mem-fraction-static")
        if raw is not None:
            return _fraction(raw, "--mem-fraction-static"), f"--mem-fraction-static {raw}"
    if share_flag is not None:
        return share_flag, f"--share {share_flag:g}"
    if plan.kind == "llamacpp" and engine is not None:
        figure = planner_share(engine)
        if figure is not None:
            return figure, f"the planner's figure for {engine.name} (its latest KV-pool ledger row)"
    return None, "not known (no share flag, no planner figure: state one with --share)"


def _fraction(raw: Any, flag: str) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise Refused(f"{flag} {raw!r} is not a number", code=2) from None
    if not 0 < value <= 1:
        raise Refused(f"{flag} {raw} is not a share of the memory (0 to 1)", code=2)
    return value


def planner_share(engine: Engine) -> float | None:
    from sparkops.planner.services import engine_model

    try:
        return engine_model(engine).current_share
    except (PlanError, ValueError, ZeroDivisionError):
        return None


def running_shares(host: Host, *, besides_url: str) -> Running:
    """[(name, share or None, basis)] of the box's engines that run now: up, their unit active or
    activating, or launched through here with their process alive."""
    from dashboard.models import Engine, Launch

    units = (host.latest or {}).get("units") or {}
    live: dict[int, Launch] = {}
    for launch in Launch.objects.filter(host=host, outcome__in=["", "ready"]).exclude(pid=None)[:100]:
        if launch.engine_id is None or launch.pid is None:  # the query leaves out pid None
            continue
        if launch.engine_id not in live and _runs_engine(launch.pid):
            live[launch.engine_id] = launch
    engines = [
        e
        for e in Engine.objects.filter(host=host, retired_at__isnull=True).order_by("name")
        if e.url.rstrip("/") != besides_url
        and (
            e.status == "up" or (units.get(e.unit) or {}).get("ActiveState") in ("active", "activating") or e.pk in live
        )
    ]
    snaps = dict((e.pk, d) for e, d in snapshots_of(engines))
    out: Running = []
    for engine in engines:
        share, basis = memory_share(engine, snaps.get(engine.pk)), "its running flags"
        if share is None and engine.kind == "llamacpp":
            share, basis = planner_share(engine), "the planner's figure"
        if share is None and engine.pk in live and live[engine.pk].share is not None:
            share, basis = live[engine.pk].share, f"planned at its launch ({live[engine.pk].share_basis})"
        out.append((engine.name, share, basis if share is not None else "share not known"))
    return out


def _runs_engine(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    argv = [w.decode("utf-8", "replace") for w in raw.rstrip(b"\0").split(b"\0")]
    return handrun.is_engine_launch(argv) is not None


def box_memory_gib(host: Host) -> float:
    from sparkops.planner.services import box_of

    gib = box_of(host)["memory_gib"]
    if gib:
        return gib

    return psutil.virtual_memory().total / GIB


def preflight(plan: Plan, running: Running, *, headroom: float, memory_gib: float) -> tuple[bool, str]:
    """(fits, the numbers in a sentence)."""
    limit = 1 - headroom
    known = [(n, s) for n, s, _ in running if s is not None]
    total = (plan.share or 0.0) + sum(s for _, s in known)
    parts = [f"this engine {plan.share:.2f} ({plan.share_basis})" if plan.share is not None else "this engine ?"]
    parts += [f"{n} {s:.2f} (running, {b})" for n, s, b in running if s is not None]
    unknown = [n for n, s, _ in running if s is None]
    text = (
        " + ".join(parts)
        + f" = {total:.2f} of the box's memory, against {limit:.2f} (1 − the audit's headroom {headroom:g})"
        + f"; of {memory_gib:.1f} GiB: {total * memory_gib:.1f} GiB planned, {limit * memory_gib:.1f} GiB allowed"
    )
    if unknown:
        text += f"; not counted (share not known): {', '.join(unknown)}"
    if plan.share is None:
        text += f"; this engine's share is {plan.share_basis}"
    return total <= limit + 1e-9, text
