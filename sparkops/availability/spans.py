"""Half-open time spans [start, end) and the set arithmetic availability needs: a union of
overlapping incidents counts once, planned work is cut out of it, all clipped to a period."""

from collections.abc import Iterable
from datetime import datetime

Span = tuple[datetime, datetime]


def spans_union(spans: Iterable[Span]) -> list[Span]:
    """Sorted, merged spans: two overlapping incidents of one engine are one stretch of downtime."""
    out: list[Span] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def spans_clip(spans: Iterable[Span], *, start: datetime, end: datetime) -> list[Span]:
    return [(max(a, start), min(b, end)) for a, b in spans_union(spans) if b > start and a < end]


def spans_subtract(spans: Iterable[Span], cut: Iterable[Span]) -> list[Span]:
    """SPANS less every part CUT covers (downtime less planned work)."""
    out: list[Span] = []
    cuts = spans_union(cut)
    for a, b in spans_union(spans):
        pieces = [(a, b)]
        for c, d in cuts:
            pieces = [p for x, y in pieces for p in ((x, min(y, c)), (max(x, d), y)) if p[1] > p[0]]
        out.extend(pieces)
    return out


def spans_seconds(spans: Iterable[Span]) -> float:
    return sum((b - a).total_seconds() for a, b in spans_union(spans))
