"""What a box can hold: its memory with the engines at given shares (`box_use`), the least share
an engine needs for a concurrency at a window (`share_for`), and the split of a box that meets
every engine's minimum (`suggest`) — over the per-engine models of `planner/model.py`."""

import math

from .model import PlanError


def box_use(*, memory_gib, other_gib, headroom_gib, shares):
    """Memory of the box with the engines at SHARES ({engine: util}): engines hold share × total
    (vLLM's --gpu-memory-utilization is a fraction of all of it), OTHER_GIB is what the rest of the
    box holds now (used − the engines' shares), HEADROOM_GIB what the operator keeps free."""
    engines = sum(s * memory_gib for s in shares.values())
    used = other_gib + engines
    return {
        "memory_gib": round(memory_gib, 2),
        "engines_gib": round(engines, 2),
        "other_gib": round(other_gib, 2),
        "used_gib": round(used, 2),
        "free_gib": round(memory_gib - used, 2),
        "headroom_gib": round(headroom_gib, 2),
        "over_headroom_gib": round(max(0.0, used + headroom_gib - memory_gib), 2),
    }


def share_for(model, concurrency, window):
    """The least share (rounded up to 0.01) at which MODEL reaches CONCURRENCY at WINDOW, with the
    workspace of a raise added when one is learned. Raises PlanError without a line."""
    wm = model.base_for(window)
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


def suggest(models, *, mins, window=None, memory_gib, other_gib, headroom_gib, fixed=None):
    """The split that meets MINS ({engine: concurrency at its window}) and gives what is left of
    the box (memory − other − headroom − FIXED engines' shares) to the engine with the fewest
    tokens per GiB: the KV-starved one. Infeasible: how many GiB (and how much share) short."""
    fixed = fixed or {}
    budget = (memory_gib - other_gib - headroom_gib) / memory_gib - sum(fixed.values())
    need, per = {}, {}
    for name, conc in mins.items():
        m = models[name]
        w = window or m.current_window
        need[name] = max(0.01, share_for(m, conc, w))
        per[name] = m.base_for(w).tokens_per_gib
    total = sum(need.values())
    rest = budget - total
    out = {
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
        memory_gib=memory_gib, other_gib=other_gib, headroom_gib=headroom_gib, shares={**shares, **fixed}
    )
    return out
