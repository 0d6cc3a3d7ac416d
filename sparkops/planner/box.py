"""What a box can hold: its memory with the engines at given shares (`box_use`), the least share
an engine needs for a concurrency at a window (`share_for`), and the split of a box that meets
every engine's minimum (`suggest`) — over the per-engine models of `planner/engine_model.py`."""

import math
from typing import Any

from .engine_model import EngineModel, NotPredictable, PlanError


def box_use(
    *, memory_gib: float, other_gib: float, headroom_gib: float, shares: dict[str, float], share_limit: float = 1.0
) -> dict[str, float]:
    """Memory of the box with the engines at SHARES ({engine: util}): engines hold share × total
    (vLLM's --gpu-memory-utilization is a fraction of all of it), OTHER_GIB is what the rest of the
    box holds now (used − the engines' shares), HEADROOM_GIB what the operator keeps free, and
    SHARE_LIMIT the most the shares may sum to (the audit's memory_share_sum: 1 − its headroom)."""
    engines = sum(s * memory_gib for s in shares.values())
    used = other_gib + engines
    total = sum(shares.values())
    return {
        "memory_gib": round(memory_gib, 2),
        "engines_gib": round(engines, 2),
        "other_gib": round(other_gib, 2),
        "used_gib": round(used, 2),
        "free_gib": round(memory_gib - used, 2),
        "headroom_gib": round(headroom_gib, 2),
        "over_headroom_gib": round(max(0.0, used + headroom_gib - memory_gib), 2),
        "shares_sum": round(total, 4),
        "share_limit": round(share_limit, 4),
        "over_share_limit": round(max(0.0, total - share_limit), 4),
    }


def share_budget(*, memory_gib: float, other_gib: float, headroom_gib: float, share_limit: float = 1.0) -> float:
    """The most the engines' shares may sum to: what the box has after the rest of it and the
    operator's headroom, and never past the audit's limit (a split the audit fails is no plan)."""
    return min((memory_gib - other_gib - headroom_gib) / memory_gib, share_limit)


def share_for(model: EngineModel, concurrency: float, window: int | None) -> float:
    """The least share (rounded up to 0.01) at which MODEL reaches CONCURRENCY at WINDOW, with the
    workspace of a raise added when one is learned. Raises PlanError without a line."""
    wm = model.base_for(window)  # PlanError when WINDOW is None and the engine has no current window
    window = window or wm.window
    if wm.slope is None or not wm.tokens_per_gib or wm.slope <= 0:
        raise PlanError(
            f"engine {model.name!r} has no share → KV line at {wm.window:,} (two shares, or one and MemTotal)"
        )
    pool = concurrency * window
    if window != wm.window and model.raise_model.tokens_per_doubling is not None:
        pool += model.raise_model.tokens_per_doubling * math.log2(window / wm.window)
    kv = pool / wm.tokens_per_gib
    share = (kv - wm.intercept) / wm.slope
    return math.ceil(round(share * 100, 6)) / 100


def suggest(
    models: dict[str, EngineModel],
    *,
    mins: dict[str, float],
    window: int | None = None,
    memory_gib: float,
    other_gib: float,
    headroom_gib: float,
    fixed: dict[str, float] | None = None,
    share_limit: float = 1.0,
) -> dict[str, Any]:
    """The split that meets MINS ({engine: concurrency at its window}) and gives what is left of
    the box (memory − other − headroom, at most SHARE_LIMIT, − FIXED engines' shares) to the engine
    with the fewest tokens per GiB: the KV-starved one. Infeasible: how many GiB (and how much share) short."""
    fixed = fixed or {}
    room = share_budget(memory_gib=memory_gib, other_gib=other_gib, headroom_gib=headroom_gib, share_limit=share_limit)
    budget = room - sum(fixed.values())
    need, per = {}, {}
    for name, conc in mins.items():
        m = models[name]
        w = window or m.current_window
        need[name] = max(0.01, share_for(m, conc, w))
        per[name] = m.base_for(w).tokens_per_gib
    total = sum(need.values())
    rest = budget - total
    out: dict[str, Any] = {
        "window": window,
        "budget_util": round(budget, 4),
        "needed_util": round(total, 4),
        "feasible": rest >= -1e-9,
        "short_gib": round(max(0.0, -rest) * memory_gib, 2),
        "short_util": round(max(0.0, -rest), 4),
        "starved": min(per, key=lambda n: per[n]) if per else None,
        "fixed": fixed,
    }
    shares = dict(need)
    if out["feasible"] and out["starved"]:
        shares[out["starved"]] = math.floor(round((need[out["starved"]] + rest) * 100, 6)) / 100
    out["split"] = {}
    for name in mins:
        p = models[name].predict(shares[name], window or models[name].current_window)
        out["split"][name] = {
            "util": shares[name],
            "min_concurrency": mins[name],
            "concurrency": p["concurrency"],
            "pool_tokens": p["pool_tokens"],
            "kv_gib": p["kv_gib"],
            "tokens_per_gib": p["tokens_per_gib"],
            "basis": p["basis"],
        }
    out["box"] = box_use(
        memory_gib=memory_gib,
        other_gib=other_gib,
        headroom_gib=headroom_gib,
        shares={**shares, **fixed},
        share_limit=share_limit,
    )
    return out


def fit(models: dict[str, EngineModel], *, held: dict[str, float], budget: float) -> dict[str, Any]:
    """The plan when no minimum is asked for: the engines' shares now (HELD), brought within BUDGET
    (share_budget). Engines the ledger cannot predict below their share keep it; the others are scaled down
    together, each keeping its part of what they hold (floored to 0.01). Shares that already fit are
    kept. {"split": {engine: share}, "scaled": bool, "fits": bool}."""
    total = sum(held.values())
    if total <= budget + 1e-9:
        return {"split": dict(held), "scaled": False, "fits": True}
    kept = {n: s for n, s in held.items() if not _predicts_below(models.get(n), s)}
    scaled = {n: s for n, s in held.items() if n not in kept}
    room = budget - sum(kept.values())
    if not scaled or room <= 0:
        return {"split": dict(held), "scaled": False, "fits": False}
    factor = room / sum(scaled.values())
    split = {n: max(0.01, math.floor(round(s * factor * 100, 6)) / 100) for n, s in scaled.items()}
    return {
        "split": {**kept, **split},
        "scaled": True,
        "fits": sum(split.values()) + sum(kept.values()) <= budget + 1e-9,
    }


def _predicts_below(model: EngineModel | None, share: float) -> bool:
    """Whether MODEL's ledger can predict it below SHARE (a line through its rows): else it is kept
    at its share. A prediction of no KV memory left still counts (the page says so at that share)."""
    if model is None or share <= 0.01:
        return False
    try:
        model.predict(round(share - 0.01, 2))
    except NotPredictable:
        return False
    except PlanError:
        return True
    return True
