"""What the KV-pool ledger teaches about one engine, and what it predicts for a share and a window.

Plain arithmetic over ledger rows (no ORM here: `rows_of` turns KVPoolEntry rows into `Row`s),
so `sparkops plan`, the planner page and its browser script compute the same numbers. The page's
script (static/js/planner.js) repeats `predict` over `EngineModel.as_json()`; keep the two alike.

The method, per engine and per window (--max-model-len) the engine has rows at:

* **Tokens per GiB** of KV memory is pool tokens ÷ KV memory, averaged over this engine's rows at
  the window that record both; the spread (lowest, highest, and the half-range as a percentage of
  the mean) says how far the rows agree. It is architectural: a Mamba hybrid holds ~305K tokens
  per GiB where a dense model holds ~31K (docs/field-notes.md §2).
* **KV memory as a function of the memory share** at one window: vLLM takes
  share × total memory, subtracts weights and workspace, and gives the rest to the KV pool, so
  KV GiB = a + b × share. With rows at two or more shares, (a, b) is the least-squares line
  through them. With one row, b is the box's memory (MemTotal: on unified memory GPU allocations
  are system RAM) and a follows from that row: the rest of the share is assumed fixed; the basis
  says so. A share the engine already ran at, at this window, predicts that row's own pool (the
  measurement beats the line).
* **The workspace a window raise costs**: vLLM reserves non-KV workspace that grows with the
  window and takes it from the budget before sizing the pool. Learned from this engine's own
  rows at two windows and one share (consecutive rows, shares within 0.005): pool tokens lost
  per doubling of the window, (pool at the lower window − pool at the higher) ÷ log2(higher ÷
  lower window), averaged over such pairs (a pair across which the pool grew is named and left
  out: something else changed at that restart); a raise by another factor costs log2 of its ratio
  times that (both raises on record are doublings, 131,072 → 262,144: docs/field-notes.md §3). It is measured
  through the pool, the figure concurrency rests on, and shown in GiB at this engine's tokens
  per GiB. The naive prediction keeps the pool unchanged ("raising the window allocates
  nothing"); the corrected one takes the learned workspace off. With no earlier raise of this
  engine there is no corrected figure but a range: from the naive one down to the largest pool
  loss per doubling that any other engine's raise in the ledger shows, else 10 %, the worst on
  record (docs/field-notes.md §3).

Every prediction carries `basis`: the ledger rows it rests on, each with its id and date.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

GIB = 1024**3
SAME_SHARE = 0.005  # two shares this close are one setting (0.25 and 0.2501 are the same flag)
FIELD_LOSS_PER_DOUBLING = 0.10  # Qwen3.8's pool, 131,072 → 262,144 on vLLM 0.27.1 (2026-08-20)
NO_EARLIER_RAISE = "no earlier raise of this engine is in the ledger"


class PlanError(ValueError):
    """A prediction the ledger cannot make; the message says what is missing."""


class NotPredictable(PlanError):
    """The ledger lacks what any prediction of this engine at this window needs (not a bad input):
    the page names the engine with what is missing and still counts its share in the box."""


NO_SHARE = (
    "its ledger rows record no memory share: it sizes its KV cache by its window and slots "
    "(llama.cpp's --ctx-size × --parallel), not by a share of the box, so it is counted at what it uses now"
)


@dataclass(frozen=True)
class Row:
    id: int
    date: str  # the ledger's own date text (YYYY-MM-DD or YYYY-MM-DD HH:MM)
    order: float  # recorded_at as a timestamp: the ledger's order
    engine: str
    share: float | None
    kv_gib: float | None
    pool_tokens: int | None
    window: int | None

    @property
    def tokens_per_gib(self) -> float | None:
        return self.pool_tokens / self.kv_gib if self.pool_tokens and self.kv_gib else None

    def ref(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "date": self.date,
            "engine": self.engine,
            "util": self.share,
            "kv_gib": None if self.kv_gib is None else round(self.kv_gib, 4),
            "pool_tokens": self.pool_tokens,
            "window": self.window,
            "tokens_per_gib": self.tokens_per_gib,
        }

    def label(self) -> str:
        gib = f", {self.kv_gib:.2f} GiB" if self.kv_gib else ""
        return f"#{self.id} {self.date} {self.engine} {self.share} @ {self.window:,}: {self.pool_tokens:,} tokens{gib}"


@dataclass
class WindowModel:
    """What one engine's rows at one window say. `line`: KV GiB = intercept + slope × share."""

    window: int
    tokens_per_gib: float | None = None
    tpg_min: float | None = None
    tpg_max: float | None = None
    tpg_rows: list = field(default_factory=list)
    intercept: float | None = None
    slope: float | None = None
    line_rows: list = field(default_factory=list)
    line_method: str = ""
    measured: list = field(default_factory=list)  # rows at this window with a share and a pool, newest last
    missing: str = ""  # what a prediction at another share lacks; "" when the line is known

    @property
    def tpg_spread_pct(self) -> float | None:
        # The three are set together from the same rows; checking each lets the types follow.
        if not self.tokens_per_gib or self.tpg_min is None or self.tpg_max is None:
            return None
        return (self.tpg_max - self.tpg_min) / 2 / self.tokens_per_gib * 100

    def as_json(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "tokens_per_gib": self.tokens_per_gib,
            "tokens_per_gib_spread": self.spread_json(),
            "tpg_rows": [r.ref() for r in self.tpg_rows],
            "intercept": self.intercept,
            "slope": self.slope,
            "line_rows": [r.ref() for r in self.line_rows],
            "line_method": self.line_method,
            "measured": [r.ref() for r in self.measured],
            "missing": self.missing,
        }

    def spread_json(self) -> dict[str, Any] | None:
        pct = self.tpg_spread_pct
        if pct is None or self.tpg_min is None or self.tpg_max is None:
            return None
        return {
            "min": round(self.tpg_min),
            "max": round(self.tpg_max),
            "pct": round(pct, 2),
            "rows": len(self.tpg_rows),
        }


@dataclass
class RaiseModel:
    """Pool tokens a window raise costs this engine, per doubling of the window."""

    tokens_per_doubling: float | None  # None: no earlier raise of this engine
    pairs: list  # [(row at the lower window, row at the higher)] of this engine
    loss_per_doubling: float  # the range's lower end when there is no earlier raise
    loss_basis: str
    loss_rows: list
    grew: list = field(default_factory=list)  # this engine's raises across which the pool grew: not learned from

    @property
    def none_basis(self) -> str:
        """What a raise without a learned workspace says about its range."""
        text = NO_EARLIER_RAISE
        if self.grew:
            text += " that cost pool (" + "; ".join(f"#{a.id} → #{b.id}" for a, b in self.grew)
            text += ": the pool grew, so something else changed at that restart too)"
        return f"{text}: the range runs down to {self.loss_basis}"

    def as_json(self) -> dict[str, Any]:
        return {
            "tokens_per_doubling": self.tokens_per_doubling,
            "pairs": [[a.ref(), b.ref()] for a, b in self.pairs],
            "grew": [[a.ref(), b.ref()] for a, b in self.grew],
            "loss_per_doubling": self.loss_per_doubling,
            "loss_basis": self.loss_basis,
            "none_basis": self.none_basis,
            "loss_rows": [r.ref() for r in self.loss_rows],
        }


def _window_model(window, rows, box_gib):
    wm = WindowModel(window=window)
    at = [r for r in rows if r.window == window and r.pool_tokens]
    wm.measured = [r for r in at if r.share is not None]
    wm.tpg_rows = [r for r in at if r.tokens_per_gib]
    if wm.tpg_rows:
        values = [r.tokens_per_gib for r in wm.tpg_rows]
        wm.tokens_per_gib = sum(values) / len(values)
        wm.tpg_min, wm.tpg_max = min(values), max(values)
    line = [r for r in at if r.share is not None and r.kv_gib]
    if len({round(r.share, 3) for r in line}) >= 2:
        fit = statistics.linear_regression([r.share for r in line], [r.kv_gib for r in line])
        wm.intercept, wm.slope = fit.intercept, fit.slope
        wm.line_rows = line
        wm.line_method = f"least-squares line through {len(line)} rows at {window:,}: KV GiB = a + b × share"
    elif line and box_gib:
        one = line[-1]
        wm.slope = box_gib
        wm.intercept = one.kv_gib - one.share * box_gib
        wm.line_rows = [one]
        wm.line_method = (
            f"one row at {window:,} and the box's memory ({box_gib:.1f} GiB): each share step moves "
            "KV memory by that much, the rest of the share (weights, workspace) assumed fixed"
        )
    elif line:
        wm.missing = (
            f"its rows at {window:,} with KV memory are all at share {line[-1].share}; it needs a second share, "
            "or the box's memory (no MemTotal reading yet: set the memory on the planner page)"
        )
    else:
        wm.missing = (
            f"no ledger row at {window:,} records its KV memory. The collector reads it from vLLM's boot line "
            "'Available KV cache memory: … GiB' in the unit's journal; for an engine without a unit, "
            "add it with 'sparkops ledger kv add --kv-gib'"
        )
    return wm


def _raise_pairs(rows):
    """Consecutive rows of one engine at one share and two windows (its recorded raises)."""
    ordered = sorted((r for r in rows if r.pool_tokens and r.window and r.share is not None), key=lambda r: r.order)
    pairs = []
    for a, b in itertools.pairwise(ordered):
        if a.window != b.window and abs(a.share - b.share) <= SAME_SHARE:
            pairs.append((a, b) if a.window < b.window else (b, a))
    return pairs


def _loss_per_doubling(pair):
    lo, hi = pair
    return (lo.pool_tokens - hi.pool_tokens) / lo.pool_tokens / math.log2(hi.window / lo.window)


@dataclass
class EngineModel:
    name: str
    windows: dict  # {window: WindowModel}
    current_window: int | None  # the window of this engine's latest row
    raise_model: RaiseModel
    rows: list

    def as_json(self) -> dict[str, Any]:
        return {
            "engine": self.name,
            "current_window": self.current_window,
            "current_util": self.current_share,
            "missing": self.missing,
            "windows": {str(w): m.as_json() for w, m in self.windows.items()},
            "raise": self.raise_model.as_json(),
        }

    @property
    def missing(self) -> str:
        """What no prediction of this engine can do without ("" when its rows have a share)."""
        return NO_SHARE if self.rows and all(r.share is None for r in self.rows) else ""

    @property
    def current_share(self) -> float | None:
        latest = max((r for r in self.rows if r.share is not None), key=lambda r: r.order, default=None)
        return latest.share if latest else None

    def base_for(self, window):
        """The window whose rows a prediction at WINDOW rests on: WINDOW itself when this engine
        has rows there, else its current window (a raise or a cut from it)."""
        if window in self.windows:
            return self.windows[window]
        if self.current_window is None:
            raise PlanError(f"engine {self.name!r} has no ledger row with a pool and a window")
        return self.windows[self.current_window]

    def predict(self, share: float, window: int | None = None) -> dict[str, Any]:
        """The pool, KV memory and concurrency at SHARE and WINDOW (default: the current window)."""
        if not 0 < share <= 1:
            raise PlanError("--util is a fraction between 0 and 1, e.g. 0.45")
        if self.missing:
            raise NotPredictable(f"cannot predict {self.name}: {self.missing}")
        window = window or self.current_window
        if window is None or window <= 0:
            raise PlanError(f"engine {self.name!r} has no ledger row with a window; pass --window")
        wm = self.base_for(window)
        measured = [r for r in wm.measured if abs(r.share - share) <= SAME_SHARE]
        basis, tpg = [], wm.tokens_per_gib
        if measured:
            row = measured[-1]
            pool, kv = float(row.pool_tokens), row.kv_gib
            tpg = row.tokens_per_gib or tpg
            method = f"measured at util {row.share} and window {wm.window:,} (row #{row.id})"
            basis.append(row)
        elif wm.slope is not None and tpg:
            kv = wm.intercept + wm.slope * share
            if kv <= 0:
                zero = -wm.intercept / wm.slope
                raise PlanError(
                    f"at util {share} {self.name} has no KV memory left: its rows put the weights and "
                    f"workspace at util {zero:.3f}"
                )
            pool = kv * tpg
            method = f"{wm.line_method}; tokens per GiB from {len(wm.tpg_rows)} row(s)"
            basis += wm.line_rows + [r for r in wm.tpg_rows if r not in wm.line_rows]
        else:
            raise NotPredictable(f"cannot predict {self.name} at util {share}: {wm.missing}")
        out = {
            "engine": self.name,
            "util": share,
            "window": window,
            "base_window": wm.window,
            "tokens_per_gib": round(tpg) if tpg else None,
            "tokens_per_gib_spread": wm.spread_json(),
            "method": method,
            "naive_concurrency": None,
            "corrected_concurrency": None,
            "concurrency_range": None,
            "workspace_gib": None,
            "raise_basis": None,
        }
        if window != wm.window:
            out.update(self._raise(pool, wm.window, window, tpg))
            basis += [r for pair in self.raise_model.pairs for r in pair if r not in basis]
            if self.raise_model.tokens_per_doubling is None:  # the range rests on other engines' raises
                basis += [r for r in self.raise_model.loss_rows if r not in basis]
            pool = out.pop("_pool")
            if kv is not None and out["workspace_gib"] is not None:
                kv -= out["workspace_gib"]
        out["pool_tokens"] = round(pool)
        out["kv_gib"] = None if kv is None else round(kv, 2)
        out["concurrency"] = round(pool / window, 2)
        out["basis"] = [r.ref() for r in basis]
        return out

    def _raise(self, pool, base, window, tpg):
        rm = self.raise_model
        naive = pool / window
        out = {"naive_concurrency": round(naive, 2)}
        if rm.tokens_per_doubling is not None:
            lost = rm.tokens_per_doubling * math.log2(window / base)
            corrected = max(0.0, pool - lost)
            out.update(
                corrected_concurrency=round(corrected / window, 2),
                workspace_gib=round(lost / tpg, 2) if tpg else None,
                raise_basis=(
                    f"{rm.tokens_per_doubling:,.0f} pool tokens per doubling of the window, from this engine's "
                    f"raise(s): " + "; ".join(f"#{a.id} → #{b.id}" for a, b in rm.pairs)
                ),
                _pool=corrected,
            )
            return out
        doublings = math.log2(window / base)
        low = naive * max(0.0, 1 - rm.loss_per_doubling * doublings) if doublings > 0 else naive
        out.update(
            concurrency_range=[round(min(low, naive), 2), round(max(low, naive), 2)],
            raise_basis=rm.none_basis,
            _pool=pool,
        )
        return out


def learn(name, rows, *, box_gib=None, all_rows=()):
    """The EngineModel of engine NAME from ROWS (its own Rows); ALL_ROWS (every engine's) give the
    range for a raise this engine has never made. BOX_GIB: the box's memory, for one-row lines."""
    own = sorted(rows, key=lambda r: r.order)
    windows = sorted({r.window for r in own if r.window and r.pool_tokens})
    latest = [r for r in own if r.window and r.pool_tokens]
    current = latest[-1].window if latest else None
    raises = _raise_pairs(own)
    pairs = [p for p in raises if p[0].pool_tokens > p[1].pool_tokens]
    grew = [p for p in raises if p not in pairs]
    per_doubling = None
    if pairs:
        per_doubling = sum(
            (lo.pool_tokens - hi.pool_tokens) / math.log2(hi.window / lo.window) for lo, hi in pairs
        ) / len(pairs)
    others: dict[str, list] = {}
    for r in all_rows:
        if r.engine != name:
            others.setdefault(r.engine, []).append(r)
    losses = [(_loss_per_doubling(p), p) for rs in others.values() for p in _raise_pairs(rs)]
    losses = [(loss, p) for loss, p in losses if loss > 0]
    if losses:
        loss, pair = max(losses, key=lambda t: t[0])
        rm = RaiseModel(
            per_doubling,
            pairs,
            loss,
            f"{loss * 100:.1f} % of the pool per doubling, {pair[0].engine}'s raise #{pair[0].id} → #{pair[1].id}",
            list(pair),
            grew,
        )
    else:
        rm = RaiseModel(
            per_doubling,
            pairs,
            FIELD_LOSS_PER_DOUBLING,
            "10 % of the pool per doubling, the field report's worst (Qwen3.8, 131,072 → 262,144, 2026-08-20)",
            [],
            grew,
        )
    return EngineModel(
        name=name,
        windows={w: _window_model(w, own, box_gib) for w in windows},
        current_window=current,
        raise_model=rm,
        rows=own,
    )
