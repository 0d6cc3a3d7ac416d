"""Importing the change log's Markdown file: a plan of what it would create (`plan_import`),
written in one transaction and in bulk (`apply_import`), and both together, planned again when
a concurrent import of the same file wins the race (`import_log`).

Entries and corrections are matched by content, so importing the same file twice creates
nothing new; engine names SparkOps does not know become retired engine records."""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, OperationalError, transaction
from django.utils import timezone

from dashboard.engine_lifecycle import retired_record
from dashboard.models import Engine
from dashboard.models.fleet import NAME_VALIDATOR

from .models import Claim, Correction, DuplicateError, Entry, EvidenceLink, FlagChange, grace_period
from .parse import LogSyntaxError, ParsedCorrection, ParsedEntry, parse_log
from .search import index_entries
from .services import _body, _evidence_fields, _one_line, _units, publish_entry


@dataclass
class ImportPlan:
    new_entries: list = field(default_factory=list)  # ParsedEntry
    new_corrections: list = field(default_factory=list)  # (Entry or ParsedEntry, ParsedCorrection)
    existing: int = 0
    # Engines the log names that SparkOps does not know: {name: first line}. They become
    # retired engine records (never polled), so every name the log was written with is kept.
    new_engines: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)  # [(line, text)] of every entry in the file

    def summary(self) -> str:
        text = (
            f"{len(self.new_entries)} new entr{'y' if len(self.new_entries) == 1 else 'ies'}, "
            f"{len(self.new_corrections)} new correction(s), {self.existing} entr"
            f"{'y' if self.existing == 1 else 'ies'} already in the log"
        )
        if self.new_engines:
            text += f", {len(self.new_engines)} retired engine record(s) for names the log knows: "
            text += ", ".join(sorted(self.new_engines))
        return text


def plan_import(text: str) -> ImportPlan:
    """What importing TEXT would create; raises LogSyntaxError (nothing is written).
    A handful of queries whatever the log's size: fingerprints and corrections are read in bulk."""
    parsed = parse_log(text)
    engines = {e.name: e for e in Engine.objects.all()}
    plan = ImportPlan()
    seen: dict[str, ParsedEntry] = {}
    fingerprints = [entry.fingerprint() for entry in parsed]
    stored = _stored_entries(set(fingerprints))
    known = _stored_corrections(stored.values())
    for entry, fp in zip(parsed, fingerprints):
        plan.notes += entry.notes
        _check_engines(entry, engines, plan.new_engines)
        target: ParsedEntry | Entry | None = seen.get(fp) or stored.get(fp)
        if target is None:
            plan.new_entries.append(entry)
            seen[fp] = entry
            target = entry
        else:
            plan.existing += 1
        have = known.setdefault(id(target), set())
        for c in entry.corrections:
            if c.fingerprint() not in have:
                plan.new_corrections.append((target, c))
                have.add(c.fingerprint())
    return plan


def _stored_entries(fingerprints: Iterable[str], chunk: int = 500) -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    fingerprints = sorted(fingerprints)
    for i in range(0, len(fingerprints), chunk):
        for e in Entry.objects.filter(fingerprint__in=fingerprints[i : i + chunk]).order_by("pk"):
            out.setdefault(e.fingerprint, e)
    return out


def _stored_corrections(entries: Iterable[Entry]) -> dict[int, set[str]]:
    """{id(entry): {correction fingerprints}} for stored ENTRIES."""
    by_pk = {e.pk: e for e in entries}
    known: dict[int, set[str]] = {id(e): set() for e in entries}
    pks = sorted(by_pk)
    for i in range(0, len(pks), 500):
        for c in Correction.objects.filter(entry_id__in=pks[i : i + 500]).select_related("claim"):
            known[id(by_pk[c.entry_id])].add(c.fingerprint())
    return known


def _check_engines(entry: ParsedEntry, engines: dict[str, Engine], new_engines: dict[str, int]) -> None:
    """Names SparkOps does not know go to NEW_ENGINES (to be kept as retired records); a name
    no engine could have is refused with its line."""
    names = [(entry.engines_line, name) for name in entry.engines]
    names += [(c["line"], c["prediction"].engine) for c in entry.claims if c["prediction"] and c["prediction"].engine]
    for n, name in names:
        if name in engines or name in new_engines:
            continue
        try:
            NAME_VALIDATOR(name)
        except ValidationError as exc:
            raise LogSyntaxError(n, f"{name!r} cannot be an engine name: {' '.join(exc.messages)}") from None
        new_engines[name] = n


LIVE_WINDOW = timedelta(days=30)  # the longest range a live chart shows
LIVE_MAX = 50


@transaction.atomic
def apply_import(plan: ImportPlan, *, author: User | None = None, author_name: str = "import") -> dict[int, Entry]:
    """Write PLAN in one transaction, in bulk (a few INSERTs per table, not a dozen queries per
    entry). Returns {id(ParsedEntry): Entry}. Open live views hear of what their charts can
    show: the entries of the last 30 days (50 at most)."""
    engines = {e.name: e for e in Engine.objects.all()}
    for name in sorted(plan.new_engines):
        if name not in engines:
            engines[name] = retired_record(name)
    now = timezone.now()
    author_name = author_name or (author.get_username() if author is not None else "")
    rows = [
        Entry(
            effective_at=p.effective_at,
            title=_one_line(p.title),
            kind=p.kind,
            units=_units(p.units),
            body_md=_body(p.body),
            reason=_one_line(p.reason),
            expected_effect=_one_line(p.expected),
            author=author,
            author_name=author_name,
            created_at=now,
            locked_at=now + grace_period(),
            fingerprint=p.fingerprint(),
        )
        for p in plan.new_entries
    ]
    # An entry SparkOps wrote is locked from its insert: it takes its parts while its fingerprint
    # is still empty (sparkops/changelog/dbguard.py), and the fingerprint written last closes it.
    observed = [(row, row.fingerprint) for row in rows if row.by_sparkops]
    for row, _ in observed:
        row.fingerprint = ""
    Entry.objects.bulk_create(rows)
    created = {id(p): row for p, row in zip(plan.new_entries, rows)}
    links, flags, claims, evidence = [], [], {}, []
    for p, row in zip(plan.new_entries, rows):
        links += [Entry.engines.through(entry_id=row.pk, engine_id=engines[n].pk) for n in p.engines]
        flags += [FlagChange(entry=row, position=i, flag=f.flag, old=f.old, new=f.new) for i, f in enumerate(p.flags)]
        for i, c in enumerate(p.claims):
            claims[(row.pk, i)] = Claim(entry=row, position=i, **_claim_fields(c, engines))
        evidence += [EvidenceLink(entry=row, **_evidence_fields(ev)) for ev in p.evidence]
    Entry.engines.through.objects.bulk_create(links)
    FlagChange.objects.bulk_create(flags)
    Claim.objects.bulk_create(list(claims.values()))
    EvidenceLink.objects.bulk_create(evidence)
    evidence = []
    for row, fingerprint in observed:
        row.fingerprint = fingerprint
        row.save(update_fields=["fingerprint"])
    targets = {t.pk for t, _ in plan.new_corrections if isinstance(t, Entry)}
    claims.update({(c.entry_id, c.position): c for c in Claim.objects.filter(entry_id__in=targets)})
    corrections = []
    for target, c in plan.new_corrections:
        entry = target if isinstance(target, Entry) else created[id(target)]
        correction = Correction(
            entry=entry,
            claim=claims[(entry.pk, c.claim - 1)] if c.claim else None,
            text_md=_body(c.text).strip(),
            mark=c.mark or "",
            corrected_at=c.corrected_at,
            author=author,
            author_name=author_name,
            created_at=now,
        )
        correction.content_fingerprint = correction.fingerprint()
        corrections.append((correction, c))
    Correction.objects.bulk_create([c for c, _ in corrections])
    evidence += [EvidenceLink(correction=row, **_evidence_fields(ev)) for row, c in corrections for ev in c.evidence]
    EvidenceLink.objects.bulk_create(evidence)
    index_entries([*rows, *{row.entry_id: row.entry for row, _ in corrections}.values()])
    _publish_recent(rows, corrections, now)
    return created


def _publish_recent(
    rows: Iterable[Entry], corrections: Sequence[tuple[Correction, ParsedCorrection]], now: datetime
) -> None:

    recent = sorted(
        {
            *(r for r in rows if r.effective_at >= now - LIVE_WINDOW),
            *(c.entry for c, _ in corrections if c.entry.effective_at >= now - LIVE_WINDOW),
        },
        key=lambda e: e.effective_at,
    )[-LIVE_MAX:]
    for entry in recent:
        publish_entry(entry)


IMPORT_ATTEMPTS = 5


def import_log(
    text: str, *, author: User | None = None, author_name: str = "import", attempts: int = IMPORT_ATTEMPTS
) -> ImportPlan:
    """Plan and apply TEXT in one transaction; returns the plan that was applied.

    Safe against another import of the same file at the same moment: the database holds one
    entry per content and one correction per content and entry (and one engine per name), so
    the import that loses the race fails as a whole, rolls back, and is planned again against
    what the winner committed — which then creates only what is still missing."""
    for attempt in range(1, attempts + 1):
        plan = plan_import(text)
        try:
            apply_import(plan, author=author, author_name=author_name)
            return plan
        except (IntegrityError, DuplicateError, OperationalError) as exc:
            if attempt == attempts or not _is_race(exc):
                raise
    raise AssertionError("unreachable")


def _is_race(exc: Exception) -> bool:
    if isinstance(exc, DuplicateError):
        return True
    text = str(exc)
    if isinstance(exc, OperationalError):  # SQLite: the other writer held the database
        return "database is locked" in text
    return not text.startswith("append-only")


def _claim_fields(claim: dict[str, Any], engines: dict[str, Engine]) -> dict[str, Any]:
    p = claim["prediction"]
    if p is None:
        return {"text": _one_line(claim["text"])}
    return {
        "text": _one_line(claim["text"]),
        "metric": p.metric,
        "predicted": p.value,
        "window": p.window,
        "engine": engines[p.engine] if p.engine else None,
    }
