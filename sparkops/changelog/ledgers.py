"""The KV-pool and incident ledgers as rows, Markdown tables and CSV, in the columns of
docs/field-notes.md §15. One row builder per ledger so the page, the Markdown and the CSV never disagree.
The CSV goes through dashboard.csv_export (no cell is a live formula; numbers stay numbers)."""

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from dashboard.csv_export import Number, csv_text
from dashboard.models import Incident, KVPoolEntry
from dashboard.models.ledgers import GIB

from .grammar import format_when

KVPOOL_COLUMNS = [
    "date",
    "engine",
    "memory share",
    "KV memory (GiB)",
    "pool (tokens)",
    "window",
    "concurrency at window",
    "tokens per GiB",
    "source",
    "note",
]
INCIDENT_COLUMNS = ["date", "unit", "trigger", "peak or duration", "fix that held", "closed", "change-log entries"]


def _num(value: float | None, fmt: str = "{:,}") -> str:
    return "" if value is None else Number(value, fmt)


def kvpool_rows() -> list[list[str]]:
    rows = KVPoolEntry.objects.select_related("engine").order_by("recorded_at", "id")
    return [
        [
            format_when(r.recorded_at),
            r.engine.name,
            _num(r.memory_share, "{:.2f}"),
            _num(r.kv_memory_bytes / GIB if r.kv_memory_bytes else None, "{:.2f}"),
            _num(r.pool_tokens),
            _num(r.window),
            _num(r.concurrency, "{:.2f}×"),
            _num(r.tokens_per_gib, "{:,.0f}"),
            r.source,
            r.note,
        ]
        for r in rows
    ]


def incident_rows() -> list[list[str]]:
    rows = Incident.objects.select_related("engine").prefetch_related("changelog_entries").order_by("opened_at", "id")
    return [
        [
            format_when(i.opened_at),
            incident_unit(i),
            i.trigger,
            i.peak or _duration(i),
            i.fix_that_held,
            format_when(i.closed_at) if i.closed_at else "",
            ", ".join(f"#{e.pk} {e.title}" for e in i.changelog_entries.all()),
        ]
        for i in rows
    ]


def incident_unit(incident: Incident) -> str:
    """The unit an incident concerns, else its engine's name; "" for a host-level one (a kernel fault)."""
    return incident.unit or (incident.engine.name if incident.engine_id else "")  # type: ignore[union-attr]  # engine_id set: an engine


def human_duration(delta: timedelta | None) -> str:
    """A timedelta as people say it: "45 s", "1 min 57 s", "2 h 5 min", "3 d 4 h" (the two
    largest units, whole numbers); None → ""."""
    if delta is None:
        return ""
    s = max(0, round(delta.total_seconds()))
    if s < 60:
        return f"{s} s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m} min {s} s" if s else f"{m} min"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(h, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def _duration(incident: Incident) -> str:
    return human_duration(incident.duration)


def as_markdown(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731 — a pipe would split the cell
    lines = [f"## {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def as_csv(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    return csv_text(columns, rows)


LEDGERS: dict[str, tuple[str, list[str], Callable[[], list[list[str]]]]] = {
    "kvpool": ("KV-pool ledger", KVPOOL_COLUMNS, kvpool_rows),
    "incidents": ("Incident ledger", INCIDENT_COLUMNS, incident_rows),
}


def export_ledger(*, ledger: str, fmt: str) -> tuple[str, str]:
    """(text, content type) of one ledger; KeyError for an unknown ledger or format."""
    title, columns, rows = LEDGERS[ledger]
    if fmt == "md":
        return as_markdown(title, columns, rows()), "text/markdown; charset=utf-8"
    if fmt == "csv":
        return as_csv(columns, rows()), "text/csv; charset=utf-8"
    raise KeyError(fmt)


def pool_chart_data() -> list[dict[str, Any]]:
    """Pool tokens per engine over time, one Plotly trace per engine."""
    traces: dict[str, dict] = {}
    for r in KVPoolEntry.objects.select_related("engine").filter(pool_tokens__isnull=False).order_by("recorded_at"):
        t = traces.setdefault(r.engine.name, {"name": r.engine.name, "x": [], "y": [], "text": []})
        t["x"].append(r.recorded_at.isoformat())
        t["y"].append(r.pool_tokens)
        t["text"].append(r.note or (f"window {r.window:,}" if r.window else ""))
    return list(traces.values())
