"""Read side of the change log: timeline queries, chart annotations, prediction vs measurement."""

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from django.db.models import Count, Exists, OuterRef, Q, QuerySet

from dashboard.models import Engine, Host, KVPoolEntry

from .models import Claim, Correction, Entry, EvidenceLink
from .search import search_filter

Rows = TypeVar("Rows", bound=Iterable[dict[str, Any]])  # claims_overview's rows, or a page of them


def _concerning(qs: QuerySet[Entry], *, engine: Engine | None = None, host: Host | None = None) -> QuerySet[Entry]:
    """Entries about ENGINE/HOST, plus entries about no engine at all (box-wide changes)."""
    if engine is not None:
        qs = qs.filter(Q(engines=engine) | Q(engines__isnull=True))
    if host is not None:
        qs = qs.filter(Q(engines__host=host) | Q(engines__isnull=True))
    return qs.distinct()


def chart_annotations(
    *, engine: Engine | None = None, host: Host | None = None, start: datetime, end: datetime
) -> list[dict[str, Any]]:
    """Entries in [start, end] as chart annotations for the live view (contract 4)."""
    corrected = Correction.objects.filter(entry=OuterRef("pk"))
    qs = _concerning(Entry.objects.filter(effective_at__gte=start, effective_at__lte=end), engine=engine, host=host)
    qs = qs.annotate(corrected=Exists(corrected)).order_by("effective_at", "id")
    return [
        {
            "id": e.pk,
            "time": e.effective_at.isoformat(),
            "title": e.title,
            "kind": e.kind,
            "url": e.get_absolute_url(),
            "corrected": e.corrected,
        }
        for e in qs
    ]


def entry_timeline(
    *,
    engine: Engine | None = None,
    kind: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    has_corrections: bool | None = None,
    text: str | None = None,
) -> QuerySet[Entry]:
    qs: QuerySet[Entry] = Entry.objects.all()
    if engine is not None:
        qs = qs.filter(engines=engine)
    if kind:
        qs = qs.filter(kind=kind)
    if start is not None:
        qs = qs.filter(effective_at__gte=start)
    if end is not None:
        qs = qs.filter(effective_at__lte=end)
    if has_corrections is not None:
        qs = _filter_corrected(qs, has_corrections)
    if text:
        qs = search_filter(qs, text)  # the database's full-text search (search.py)
    qs = qs.distinct().annotate(n_corrections=Count("corrections", distinct=True))
    return qs.prefetch_related("engines", "flags").order_by("-effective_at", "-id")


def _filter_corrected(qs: QuerySet[Entry], has_corrections: bool) -> QuerySet[Entry]:
    corrected = Exists(Correction.objects.filter(entry=OuterRef("pk")))
    return qs.filter(corrected) if has_corrections else qs.exclude(corrected)


_METRIC_READERS = {
    "concurrency": lambda row: row.concurrency,
    "pool_tokens": lambda row: row.pool_tokens,
    "kv_memory_gib": lambda row: row.kv_memory_bytes / 1024**3 if row.kv_memory_bytes else None,
    "tokens_per_gib": lambda row: row.tokens_per_gib,
}


def claim_measurement(*, claim: Claim) -> dict[str, Any] | None:
    """The first KV-pool ledger row after the entry took effect that measures what the claim
    predicted (same engine, same window when one was predicted), or None."""
    if not claim.has_prediction or claim.metric not in _METRIC_READERS:
        return None
    engines = [claim.engine] if claim.engine_id else list(claim.entry.engines.all())
    if not engines:
        return None
    rows = KVPoolEntry.objects.filter(engine__in=engines, recorded_at__gte=claim.entry.effective_at)
    if claim.window:
        rows = rows.filter(window=claim.window)
    for row in rows.select_related("engine").order_by("recorded_at", "id"):
        value = _METRIC_READERS[claim.metric](row)
        if value is not None:
            return _comparison(claim, row, value)
    return None


def _comparison(claim: Claim, row: KVPoolEntry, value: float) -> dict[str, Any]:
    off_pct = abs(value - claim.predicted) / abs(claim.predicted) * 100 if claim.predicted else None
    return {
        "row": row,
        "measured": value,
        "predicted": claim.predicted,
        "off_pct": off_pct,
        "differs": off_pct is None or off_pct > claim.tolerance_pct,
    }


CLAIM_STATES = ("standing", "corrected", "withdrawn", "superseded")
BELIEVED = ("standing", "corrected")  # what the log holds true now: as written, or as corrected


def claim_state(corrections: Sequence[Correction]) -> str:
    """CORRECTIONS: the claim's own, oldest first. The latest withdrawal or supersession
    decides; a correction without a mark leaves the claim standing, corrected."""
    marked = [c for c in corrections if c.mark]
    if marked:
        return marked[-1].mark
    return "corrected" if corrections else "standing"


def claims_overview(
    *, engine: Engine | None = None, state: str | None = None, measure: bool = True
) -> list[dict[str, Any]]:
    """Every claim with its state, engines, prediction against measurement and evidence —
    "what do we believe now?". ENGINE: the claim's own (its prediction's) or, for a claim
    without one, its entry's. STATE: one of CLAIM_STATES, "believed" (standing or corrected),
    or None for all. MEASURE=False leaves "comparison" to measure_claims() (a page's rows only).
    Related rows are read once per table and grouped here (prefetch_related's per-claim
    querysets were most of the page's time at the size of docs/field-notes.md §15)."""

    qs = Claim.objects.select_related("entry", "engine")
    if engine is not None:
        qs = qs.filter(Q(engine=engine) | Q(engine__isnull=True, entry__engines=engine)).distinct()
    claims = list(qs.order_by("-entry__effective_at", "-entry_id", "position"))
    entry_ids = qs.values("entry_id")
    engines = {e.pk: e for e in Engine.objects.all()}
    entry_engines, entry_evidence, corrections, corr_evidence = (defaultdict(list) for _ in range(4))
    for entry_id, engine_id in (
        Entry.engines.through.objects.filter(entry_id__in=entry_ids)
        .order_by("engine__name")
        .values_list("entry_id", "engine_id")
    ):
        entry_engines[entry_id].append(engines[engine_id])
    for ev in EvidenceLink.objects.filter(entry_id__in=entry_ids).order_by("id"):
        entry_evidence[ev.entry_id].append(ev)
    for c in Correction.objects.filter(claim_id__in=qs.values("pk")).order_by("corrected_at", "id"):
        corrections[c.claim_id].append(c)
    for ev in EvidenceLink.objects.filter(correction__claim_id__in=qs.values("pk")).order_by("id"):
        corr_evidence[ev.correction_id].append(ev)
    wanted = set(BELIEVED) if state == "believed" else ({state} if state else None)
    rows = []
    for claim in claims:
        own = corrections[claim.pk]
        current = claim_state(own)
        if wanted is not None and current not in wanted:
            continue
        rows.append(
            {
                "claim": claim,
                "entry": claim.entry,
                "state": current,
                "corrections": own,
                "engines": [claim.engine] if claim.engine_id else entry_engines[claim.entry_id],
                "comparison": None,
                "evidence": [*entry_evidence[claim.entry_id], *(ev for c in own for ev in corr_evidence[c.pk])],
            }
        )
    return measure_claims(rows) if measure else rows


def measure_claims(rows: Rows) -> Rows:
    """claim_measurement() for every row's claim, reading the ledger once for all of them."""
    wanted = [r for r in rows if r["claim"].has_prediction and r["claim"].metric in _METRIC_READERS and r["engines"]]
    if not wanted:
        return rows
    engine_ids = {e.pk for r in wanted for e in r["engines"]}
    since = min(r["entry"].effective_at for r in wanted)
    ledger = list(
        KVPoolEntry.objects.filter(engine_id__in=engine_ids, recorded_at__gte=since)
        .select_related("engine")
        .order_by("recorded_at", "id")
    )
    for r in wanted:
        claim, engines = r["claim"], {e.pk for e in r["engines"]}
        for row in ledger:
            if row.engine_id not in engines or row.recorded_at < r["entry"].effective_at:
                continue
            if claim.window and row.window != claim.window:
                continue
            value = _METRIC_READERS[claim.metric](row)
            if value is not None:
                r["comparison"] = _comparison(claim, row, value)
                break
    return rows
