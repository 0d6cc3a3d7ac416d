"""Write side of the change log. Every write goes through here so the fingerprint, the edit
history and the live event are never forgotten."""

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from dashboard.livebus import GROUP_ALL, LiveEvent, publish_on_commit
from dashboard.models import Engine, Incident

from .grammar import EvidenceLine, FlagLine
from .models import (
    AppendOnlyError,
    Claim,
    Correction,
    DuplicateError,
    Entry,
    EntryRevision,
    EvidenceLink,
    FlagChange,
    content_hash,
)
from .search import index_entries


def _name(user: User | None) -> str:
    return user.get_username() if user is not None else ""


def fingerprint_of(
    *,
    effective_at: datetime,
    title: str,
    kind: str,
    engines: Iterable[str],
    units: str,
    body: str,
    reason: str,
    expected: str,
    flags: Iterable[Sequence[str]],
    claims: Iterable[tuple[str, str | None, float | None, int | None, str | None]],
) -> str:
    """Identity of an entry's content, so importing the same log twice creates nothing new."""
    when = effective_at.astimezone(UTC).isoformat(timespec="minutes")
    return content_hash(
        when,
        _one_line(title),
        kind,
        sorted(engines),
        _units(units),
        _body(body),
        _one_line(reason),
        _one_line(expected),
        [list(f) for f in flags],
        [
            [_one_line(text), metric or "", predicted, window, engine]
            for text, metric, predicted, window, engine in claims
        ],
    )


def entry_fingerprint(entry: Entry) -> str:
    return fingerprint_of(
        effective_at=entry.effective_at,
        title=entry.title,
        kind=entry.kind,
        engines=[e.name for e in entry.engines.all()],
        units=entry.units,
        body=entry.body_md,
        reason=entry.reason,
        expected=entry.expected_effect,
        flags=[(f.flag, f.old, f.new) for f in entry.flags.all()],
        claims=[
            (c.text, c.metric, c.predicted, c.window, c.engine.name if c.engine_id else None)  # type: ignore[union-attr]
            for c in entry.claims.all()
        ],
    )


def _one_line(text: str | None) -> str:
    """Titles, reasons, expected effects, claims and units are one line each in the Markdown log."""
    return " ".join((text or "").split())


def entry_snapshot(entry: Entry) -> dict[str, Any]:
    return {
        "effective_at": entry.effective_at.isoformat(),
        "kind": entry.kind,
        "title": entry.title,
        "engines": sorted(e.name for e in entry.engines.all()),
        "units": entry.units,
        "body_md": entry.body_md,
        "reason": entry.reason,
        "expected_effect": entry.expected_effect,
        "flags": [str(f) for f in entry.flags.all()],
        "claims": [c.text for c in entry.claims.all()],
    }


def _units(text: str | None) -> str:
    return ", ".join(u.strip() for u in (text or "").split(",") if u.strip())


def _body(text: str | None) -> str:
    # Trailing spaces and CRLF would not survive a Markdown round trip byte for byte.
    return "\n".join(line.rstrip() for line in (text or "").splitlines()).strip("\n")


def _write_children(
    entry: Entry, *, flags: Iterable[FlagLine], claims: Iterable[dict[str, Any]], evidence: Iterable[EvidenceLine]
) -> None:
    for pos, f in enumerate(flags):
        FlagChange.objects.create(entry=entry, position=pos, flag=f.flag, old=f.old, new=f.new)
    for pos, c in enumerate(claims):
        Claim.objects.create(entry=entry, position=pos, **{**c, "text": _one_line(c["text"])})
    for ev in evidence:
        EvidenceLink.objects.create(entry=entry, **_evidence_fields(ev))


def _evidence_fields(ev: EvidenceLine) -> dict[str, Any]:
    return {
        "kind": ev.kind,
        "url": ev.url,
        "ref_id": ev.ref_id,
        "window_start": ev.window_start,
        "window_end": ev.window_end,
    }


@transaction.atomic
def entry_create(
    *,
    author: User | None = None,
    author_name: str = "",
    effective_at: datetime,
    title: str,
    kind: str,
    engines: Iterable[Engine] = (),
    units: str = "",
    body_md: str = "",
    reason: str = "",
    expected_effect: str = "",
    flags: Iterable[FlagLine] = (),
    claims: Iterable[dict[str, Any]] = (),
    evidence: Iterable[EvidenceLine] = (),
    incidents: Iterable[Incident] = (),
) -> Entry:
    """FLAGS: grammar.FlagLine list; CLAIMS: dicts of Claim fields; EVIDENCE: grammar.EvidenceLine list."""
    entry = Entry.objects.create(
        effective_at=effective_at,
        title=_one_line(title),
        kind=kind,
        units=_units(units),
        body_md=_body(body_md),
        reason=_one_line(reason),
        expected_effect=_one_line(expected_effect),
        author=author,
        author_name=author_name or _name(author),
    )
    entry.engines.set(engines)
    entry.incidents.set(incidents)
    _write_children(entry, flags=flags, claims=claims, evidence=evidence)
    _refresh_fingerprint(entry)
    index_entries([entry])
    _publish(entry)
    return entry


def _refresh_fingerprint(entry: Entry) -> None:
    entry.fingerprint = entry_fingerprint(entry)
    twin = Entry.objects.filter(fingerprint=entry.fingerprint).exclude(pk=entry.pk).first()
    if twin is not None:  # the unique constraint would refuse it too; this says which one
        raise DuplicateError(f"The log already has this entry: “{twin}” (#{twin.pk}); nothing was saved.", twin)
    entry.save(update_fields=["fingerprint"])


@transaction.atomic
def entry_edit(
    *,
    entry: Entry,
    user: User,
    effective_at: datetime,
    title: str,
    kind: str,
    engines: Iterable[Engine],
    units: str = "",
    body_md: str = "",
    reason: str = "",
    expected_effect: str = "",
    flags: Iterable[FlagLine] = (),
    claims: Sequence[dict[str, Any]] = (),
) -> Entry:
    """Fix a typo inside the grace period; what it said before is kept as an EntryRevision."""
    entry = Entry.objects.select_for_update().get(pk=entry.pk)
    if entry.is_locked:
        raise AppendOnlyError(f"This entry is {entry.locked_why}.")
    EntryRevision.objects.create(entry=entry, revised_by=user, snapshot=entry_snapshot(entry))
    entry.effective_at, entry.title, entry.kind, entry.units = effective_at, _one_line(title), kind, _units(units)
    entry.body_md, entry.reason, entry.expected_effect = _body(body_md), _one_line(reason), _one_line(expected_effect)
    entry.save()
    entry.engines.set(engines)
    _replace_flags(entry, flags)
    _update_claims(entry, claims)
    _refresh_fingerprint(entry)
    index_entries([entry])
    _publish(entry)
    return entry


def _replace_flags(entry: Entry, flags: Iterable[FlagLine]) -> None:
    for old in entry.flags.all():
        old.delete()
    _write_children(entry, flags=flags, claims=(), evidence=())


def _update_claims(entry: Entry, claims: Sequence[dict[str, Any]]) -> None:
    """Keep claim rows (a correction may already point at one), change them in place."""
    existing = list(entry.claims.all())
    for pos, fields in enumerate(claims):
        claim = existing[pos] if pos < len(existing) else Claim(entry=entry, position=pos)
        for key, value in {**fields, "text": _one_line(fields["text"])}.items():
            setattr(claim, key, value)
        claim.save()
    for extra in existing[len(claims) :]:
        if extra.corrections.exists():
            raise AppendOnlyError(f"Claim {extra.position + 1} has a correction and cannot be removed.")
        extra.delete()


@transaction.atomic
def correction_create(
    *,
    entry: Entry,
    author: User | None = None,
    author_name: str = "",
    text_md: str,
    corrected_at: datetime | None = None,
    claim: Claim | None = None,
    mark: str | None = "",
    evidence: Iterable[EvidenceLine] = (),
) -> Correction:
    correction = Correction.objects.create(
        entry=entry,
        claim=claim,
        text_md=_body(text_md).strip(),
        mark=mark or "",
        corrected_at=corrected_at or timezone.now(),
        author=author,
        author_name=author_name or _name(author),
    )
    for ev in evidence:
        EvidenceLink.objects.create(correction=correction, **_evidence_fields(ev))
    index_entries([entry])
    _publish(entry, correction=correction)
    return correction


def entry_link_incidents(*, entry: Entry, incidents: Iterable[Incident]) -> None:
    """Linking an incident to the entry that fixed it is about the incident; allowed at any age."""
    entry.incidents.add(*incidents)


def publish_entry(entry: Entry) -> None:
    """Tell open live views about ENTRY once the transaction commits."""
    _publish(entry)


def _publish(entry: Entry, correction: Correction | None = None) -> None:
    payload = {
        "id": entry.pk,
        "time": entry.effective_at.isoformat(),
        "title": entry.title,
        "kind": entry.kind,
        "url": entry.get_absolute_url(),
        "engines": sorted(e.name for e in entry.engines.all()),
        "corrected": correction is not None or entry.corrections.exists(),
    }
    if correction is not None:
        payload["correction"] = {
            "id": correction.pk,
            "time": correction.corrected_at.isoformat(),
            "mark": correction.mark,
            "claim": correction.claim_id,
        }
    publish_on_commit(GROUP_ALL, LiveEvent(type="changelog.entry", payload=payload))
