"""Text search of the change log with the database's own full-text search: PostgreSQL's
tsvector (a generated, GIN-indexed column of changelog_searchdocument) and SQLite's FTS5 (a
table kept in step by triggers). Words match as prefixes ('prefi' finds 'prefix-cache'),
all of them must occur. Other databases fall back to substring matching."""

import re
from collections.abc import Iterable

from django.db import connection
from django.db.models import Q, QuerySet
from django.db.models.expressions import RawSQL

from .models import Correction, Entry, SearchDocument

_PG_MATCH = (
    "SELECT entry_id FROM changelog_searchdocument WHERE vector @@ to_tsquery('simple', "
    "regexp_replace(plainto_tsquery('simple', %s)::text, '''(?= &|$)', ''':*', 'g'))"
)
_SQLITE_MATCH = "SELECT rowid FROM changelog_search_fts WHERE changelog_search_fts MATCH %s"


def document_text(
    *,
    title: str,
    body: str,
    reason: str,
    expected: str,
    units: str,
    engines: Iterable[str],
    flags: Iterable[str],
    claims: Iterable[str],
    corrections: Iterable[str],
) -> str:
    return "\n".join([title, *engines, units, reason, expected, *flags, *claims, body, *corrections])


def _document(entry: Entry) -> str:
    return document_text(
        title=entry.title,
        body=entry.body_md,
        reason=entry.reason,
        expected=entry.expected_effect,
        units=entry.units,
        engines=[e.name for e in entry.engines.all()],
        flags=[f"{f.flag} {f.old} {f.new}" for f in entry.flags.all()],
        claims=[c.text for c in entry.claims.all()],
        corrections=[c.text_md for c in entry.corrections.all()],
    )


def index_entries(entries: Iterable[Entry]) -> None:
    """(Re)write the search documents of ENTRIES (a few queries for any number of them)."""
    pks = sorted({e.pk for e in entries})
    for i in range(0, len(pks), 500):
        chunk = pks[i : i + 500]
        fresh = Entry.objects.filter(pk__in=chunk).prefetch_related("engines", "flags", "claims", "corrections")
        docs = [SearchDocument(entry=e, document=_document(e)) for e in fresh]
        SearchDocument.objects.filter(entry_id__in=chunk).delete()
        SearchDocument.objects.bulk_create(docs)


def search_filter(qs: QuerySet[Entry], text: str) -> QuerySet[Entry]:
    """QS (entries) narrowed to those whose text has every word of TEXT."""
    if connection.vendor == "postgresql":
        return qs.filter(pk__in=RawSQL(_PG_MATCH, [text]))
    if connection.vendor == "sqlite":
        words = re.findall(r"\w+", text)
        if not words:
            return qs.none()
        return qs.filter(pk__in=RawSQL(_SQLITE_MATCH, [" ".join(f'"{w}"*' for w in words)]))
    corrected = Correction.objects.filter(text_md__icontains=text).values("entry_id")
    return qs.filter(
        Q(title__icontains=text)
        | Q(body_md__icontains=text)
        | Q(reason__icontains=text)
        | Q(claims__text__icontains=text)
        | Q(flags__flag__icontains=text)
        | Q(pk__in=corrected)
    )


PG_SQL = [
    """ALTER TABLE changelog_searchdocument ADD COLUMN vector tsvector
       GENERATED ALWAYS AS (to_tsvector('simple', document)) STORED""",
    "CREATE INDEX changelog_search_vector ON changelog_searchdocument USING gin (vector)",
]
SQLITE_SQL = [
    "CREATE VIRTUAL TABLE changelog_search_fts USING fts5(document)",
    """CREATE TRIGGER changelog_search_ai AFTER INSERT ON changelog_searchdocument BEGIN
       INSERT INTO changelog_search_fts(rowid, document) VALUES (new.entry_id, new.document); END""",
    """CREATE TRIGGER changelog_search_ad AFTER DELETE ON changelog_searchdocument BEGIN
       DELETE FROM changelog_search_fts WHERE rowid = old.entry_id; END""",
    """CREATE TRIGGER changelog_search_au AFTER UPDATE ON changelog_searchdocument BEGIN
       DELETE FROM changelog_search_fts WHERE rowid = old.entry_id;
       INSERT INTO changelog_search_fts(rowid, document) VALUES (new.entry_id, new.document); END""",
]
