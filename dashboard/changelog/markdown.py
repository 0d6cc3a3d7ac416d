"""The change log as a plain Markdown file, both ways.

    ## 2026-08-20 09:00 · Raise the window on both engines
    Engines: nemotron, q38
    Kind: flag_change
    Flag: --max-model-len: 131072 → 262144
    Claim: raising --max-model-len allocates nothing
    Prediction: concurrency 10.6 at 262144 on nemotron

    Body in Markdown.

    > Correction 2026-08-20 14:00 (claim 1, superseded): vLLM sizes window-scaled workspace
    > before the pool; the pool shrank 2.7 %.

Import refuses a malformed file as a whole, naming the line; it matches entries and
corrections by content, so importing the same file twice creates nothing new. The header
keys, their order and the blank lines are fixed on export so export → import → export is
byte-identical (README, "Change log")."""

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, timedelta

from django.core.exceptions import ValidationError
from django.db import IntegrityError, OperationalError, transaction
from django.utils import timezone

from dashboard.engine_lifecycle import retired_record
from dashboard.models import Engine
from dashboard.models.fleet import NAME_VALIDATOR

from .grammar import (
    EvidenceLine,
    Prediction,
    fenced_lines,
    format_when,
    parse_evidence,
    parse_flag,
    parse_prediction,
    parse_when,
)
from .models import Claim, Correction, DuplicateError, Entry, EvidenceLink, FlagChange, content_hash, grace_period
from .search import index_entries
from .services import _body, _evidence_fields, _one_line, _units, fingerprint_of

# The title may follow the date after ' · ' (what export writes), ' — ', ' – ', ' - ' or ': '.
HEADING = re.compile(r"^## (?P<when>\S+(?: \d{1,2}:\d{2})?)(?: · | — | – | - |: )(?P<title>\S.*?)\s*$")
CORRECTION = re.compile(
    r"^> ?Correction (?P<when>\d{4}-\d{2}-\d{2}(?: \d{2}:\d{2})?)(?: \((?P<opts>[^)]*)\))?:\s?(?P<text>.*)$"
)
HEADER = re.compile(
    r"^(?P<key>Engines|Units|Kind|Flag|Reason|Expected|Claim|Prediction|Evidence):\s?(?P<value>.*)$", re.IGNORECASE
)
SINGLE_KEYS = {"Engines", "Units", "Kind", "Reason", "Expected"}
KINDS = {**{value: value for value in Entry.Kind.values}, **{label: value for value, label in Entry.Kind.choices}}


def _kind_key(text):
    """'Flag-Change', 'flag change', 'FLAG_CHANGE' → 'flag_change'."""
    return re.sub(r"[\s_-]+", "_", text.strip().lower())


class LogSyntaxError(ValueError):
    def __init__(self, line, message):
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass
class ParsedCorrection:
    line: int
    corrected_at: object
    text: str
    claim: int | None = None  # 1-based, as written
    mark: str = ""
    evidence: list = field(default_factory=list)

    def fingerprint(self):
        return content_hash(
            _utc_minutes(self.corrected_at), self.claim - 1 if self.claim else None, self.mark, self.text.strip()
        )


@dataclass
class ParsedEntry:
    line: int
    effective_at: object
    title: str
    engines: list = field(default_factory=list)
    engines_line: int = 0
    units: str = ""
    kind: str = Entry.Kind.FLAG_CHANGE
    flags: list = field(default_factory=list)
    reason: str = ""
    expected: str = ""
    claims: list = field(default_factory=list)  # [{"text", "prediction", "line"}]
    evidence: list = field(default_factory=list)
    body: str = ""
    corrections: list = field(default_factory=list)
    notes: list = field(default_factory=list)  # [(line, text)]: liberal readings the import reports

    def fingerprint(self):
        claims = [(c["text"], *_prediction_tuple(c["prediction"])) for c in self.claims]
        return fingerprint_of(
            effective_at=self.effective_at,
            title=self.title,
            kind=self.kind,
            engines=self.engines,
            units=self.units,
            body=self.body,
            reason=self.reason,
            expected=self.expected,
            flags=[(f.flag, f.old, f.new) for f in self.flags],
            claims=claims,
        )


def _prediction_tuple(p):
    return (p.metric, p.value, p.window, p.engine) if p else ("", None, None, None)


def _utc_minutes(value):

    return value.astimezone(UTC).isoformat(timespec="minutes")


# ---- parsing -------------------------------------------------------------------------------


def parse_log(text):
    """Markdown text → [ParsedEntry]; raises LogSyntaxError naming the first bad line."""
    entries, current = [], None
    lines = text.splitlines()
    fenced, unclosed = fenced_lines(lines)
    if unclosed:
        raise LogSyntaxError(unclosed, "a code fence (``` or ~~~) opens here and is never closed")
    blocks = []
    for n, line in enumerate(lines, 1):
        if line.startswith("## ") and n not in fenced:
            current = [n]
            blocks.append(current)
        elif current is not None:
            current.append(n)
    if not blocks:
        raise LogSyntaxError(len(lines) or 1, "no entries: each entry starts with '## YYYY-MM-DD[ HH:MM] · title'")
    for block in blocks:
        entries.append(_parse_entry([(n, lines[n - 1]) for n in block], fenced))
    return entries


def _parse_entry(numbered, fenced=frozenset()):
    (n, heading), rest = numbered[0], numbered[1:]
    m = HEADING.match(heading)
    if not m:
        raise LogSyntaxError(
            n,
            "an entry heading reads '## YYYY-MM-DD[ HH:MM] · title' (or ' — ', ' - ', ': ' "
            "before the title); inside an entry use '### ', or put the line in a code fence",
        )
    entry = ParsedEntry(line=n, effective_at=_when(n, m["when"]), title=m["title"])
    try:
        _fits("the title", entry.title, Entry._meta.get_field("title").max_length)
    except ValueError as exc:
        raise LogSyntaxError(n, str(exc)) from None
    i = _parse_headers(entry, rest)
    if not any(HEADER.match(line)["key"].capitalize() == "Kind" for _, line in rest[:i]):
        entry.kind = Entry.Kind.FLAG_CHANGE if entry.flags else Entry.Kind.DECISION
    _parse_body(entry, rest[i:], fenced)
    return entry


def _fits(what, text, limit):
    """The form's length limits hold on the import path too (a 5,000-character title once widened the list)."""
    if len(text) > limit:
        raise ValueError(f"{what} is {len(text):,} characters; at most {limit:,} fit (move the rest into the body)")


def _when(n, text):
    try:
        return parse_when(text)
    except ValueError as exc:
        raise LogSyntaxError(n, str(exc)) from None


def _parse_headers(entry, rest):
    seen = set()
    for i, (n, line) in enumerate(rest):
        m = HEADER.match(line)
        if not m:
            return i
        key, value = m["key"].capitalize(), m["value"].strip()
        if key in SINGLE_KEYS and key in seen:
            raise LogSyntaxError(n, f"'{key}:' appears twice in one entry")
        seen.add(key)
        _apply_header(entry, n, key, value)
    return len(rest)


def _apply_header(entry, n, key, value):
    if not value:
        raise LogSyntaxError(n, f"'{key}:' has no value")
    try:
        if key == "Engines":
            entry.engines = sorted({name.strip() for name in value.split(",") if name.strip()})
            entry.engines_line = n
        elif key == "Units":
            entry.units = ", ".join(u.strip() for u in value.split(",") if u.strip())
        elif key == "Kind":
            kind = KINDS.get(value) or KINDS.get(_kind_key(value))
            if kind is None:
                raise ValueError(f"unknown kind {value!r}; use one of {', '.join(Entry.Kind.values)}")
            entry.kind = kind
        elif key == "Flag":
            flag = parse_flag(value)
            _fits("the flag name", flag.flag, FlagChange._meta.get_field("flag").max_length)
            for side in (flag.old, flag.new):
                _fits("a flag value", side or "", FlagChange._meta.get_field("new").max_length)
            entry.flags.append(flag)
        elif key in ("Reason", "Expected"):
            setattr(entry, "reason" if key == "Reason" else "expected", value)
        elif key == "Claim":
            entry.claims.append({"text": value, "prediction": None, "line": n})
        elif key == "Prediction":
            if not entry.claims or entry.claims[-1]["prediction"] is not None:
                raise ValueError("'Prediction:' must follow the 'Claim:' line it belongs to")
            entry.claims[-1]["prediction"] = parse_prediction(value)
        elif key == "Evidence":
            entry.evidence.append(parse_evidence(value))
    except ValueError as exc:
        raise LogSyntaxError(n, str(exc)) from None


def _parse_body(entry, rest, fenced=frozenset()):
    body, correction, after = [], None, None  # after: the correction whose blockquote just ended
    for n, line in rest:
        if n in fenced:  # a code block: '## ' and '> Correction' lines in it are only text
            correction, after = None, _note_after(entry, n, line, correction or after)
            body.append(line)
            continue
        m = CORRECTION.match(line)
        if m:
            correction = _start_correction(entry, n, m)
        elif line.startswith("> Correction") or line.startswith(">Correction"):
            raise LogSyntaxError(
                n, "a correction starts '> Correction YYYY-MM-DD[ HH:MM][ (claim N, withdrawn|superseded)]: text'"
            )
        elif correction is not None and line.startswith(">"):
            _continue_correction(correction, n, line[1:].removeprefix(" "))
        else:
            correction, after = None, _note_after(entry, n, line, correction or after)
            body.append(line)
    entry.body = _clean_text("\n".join(body))
    for c in entry.corrections:
        c.text = _clean_text(c.text)
        if not c.text.strip():
            raise LogSyntaxError(c.line, "a correction needs text after the colon")


def _note_after(entry, n, line, correction):
    """Text below a correction's blockquote is the entry's body (export writes it above the
    corrections); say so once per correction. Returns the correction still to report."""
    if correction is None or not line.strip():
        return correction
    entry.notes.append((n, f"text after the correction of line {correction.line} is kept as the entry's body"))
    return None


def _clean_text(text):
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


def _start_correction(entry, n, m):
    claim, mark = None, ""
    for opt in filter(None, (o.strip() for o in (m["opts"] or "").split(","))):
        if re.fullmatch(r"claim \d+", opt):
            claim = int(opt.split()[1])
            if not 1 <= claim <= len(entry.claims):
                raise LogSyntaxError(n, f"claim {claim} does not exist; this entry has {len(entry.claims)} claim(s)")
        elif opt in ("withdrawn", "superseded"):
            mark = opt
        else:
            raise LogSyntaxError(n, f"unknown correction option {opt!r}; use 'claim N', 'withdrawn' or 'superseded'")
    if mark and claim is None:
        raise LogSyntaxError(n, f"'{mark}' applies to one claim; write '(claim N, {mark})'")
    correction = ParsedCorrection(line=n, corrected_at=_when(n, m["when"]), text=m["text"], claim=claim, mark=mark)
    entry.corrections.append(correction)
    return correction


def _continue_correction(correction, n, text):
    if text.startswith("Evidence: "):
        try:
            correction.evidence.append(parse_evidence(text.removeprefix("Evidence: ")))
        except ValueError as exc:
            raise LogSyntaxError(n, str(exc)) from None
    elif correction.evidence:
        raise LogSyntaxError(n, "a correction's 'Evidence:' lines come after its text")
    else:
        correction.text += "\n" + text


# ---- import --------------------------------------------------------------------------------


@dataclass
class ImportPlan:
    new_entries: list = field(default_factory=list)  # ParsedEntry
    new_corrections: list = field(default_factory=list)  # (Entry or ParsedEntry, ParsedCorrection)
    existing: int = 0
    # Engines the log names that SparkOps does not know: {name: first line}. They become
    # retired engine records (never polled), so every name the log was written with is kept.
    new_engines: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)  # [(line, text)] of every entry in the file

    def summary(self):
        text = (
            f"{len(self.new_entries)} new entr{'y' if len(self.new_entries) == 1 else 'ies'}, "
            f"{len(self.new_corrections)} new correction(s), {self.existing} entr"
            f"{'y' if self.existing == 1 else 'ies'} already in the log"
        )
        if self.new_engines:
            text += f", {len(self.new_engines)} retired engine record(s) for names the log knows: "
            text += ", ".join(sorted(self.new_engines))
        return text


def plan_import(text):
    """What importing TEXT would create; raises LogSyntaxError (nothing is written).
    A handful of queries whatever the log's size: fingerprints and corrections are read in bulk."""
    parsed = parse_log(text)
    engines = {e.name: e for e in Engine.objects.all()}
    plan, seen = ImportPlan(), {}
    fingerprints = [entry.fingerprint() for entry in parsed]
    stored = _stored_entries(set(fingerprints))
    known = _stored_corrections(stored.values())
    for entry, fp in zip(parsed, fingerprints):
        plan.notes += entry.notes
        _check_engines(entry, engines, plan.new_engines)
        target = seen.get(fp) or stored.get(fp)
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


def _stored_entries(fingerprints, chunk=500):
    out, fingerprints = {}, sorted(fingerprints)
    for i in range(0, len(fingerprints), chunk):
        for e in Entry.objects.filter(fingerprint__in=fingerprints[i : i + chunk]).order_by("pk"):
            out.setdefault(e.fingerprint, e)
    return out


def _stored_corrections(entries):
    """{id(entry): {correction fingerprints}} for stored ENTRIES."""
    by_pk = {e.pk: e for e in entries}
    known = {id(e): set() for e in entries}
    pks = sorted(by_pk)
    for i in range(0, len(pks), 500):
        for c in Correction.objects.filter(entry_id__in=pks[i : i + 500]).select_related("claim"):
            known[id(by_pk[c.entry_id])].add(c.fingerprint())
    return known


def _check_engines(entry, engines, new_engines):
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
def apply_import(plan, *, author=None, author_name="import"):
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
    # An observed entry is locked from its insert: it takes its parts while its fingerprint is
    # still empty (dashboard/changelog/dbguard.py), and the fingerprint written last closes it.
    observed = [(row, row.fingerprint) for row in rows if row.is_observed]
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


def _publish_recent(rows, corrections, now):
    from .services import publish_entry

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


def import_log(text, *, author=None, author_name="import", attempts=IMPORT_ATTEMPTS):
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


def _is_race(exc):
    if isinstance(exc, DuplicateError):
        return True
    text = str(exc)
    if isinstance(exc, OperationalError):  # SQLite: the other writer held the database
        return "database is locked" in text
    return not text.startswith("append-only")


def _claim_fields(claim, engines):
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


# ---- export --------------------------------------------------------------------------------


def _entries_for_export():
    """Every entry, oldest first, with its parts attached as lists (ex_engines, ex_flags,
    ex_claims, ex_evidence, ex_corrections; a correction's ex_evidence): one query per table,
    grouped here — Django's prefetch_related spent most of an export building per-entry querysets."""
    from collections import defaultdict

    entries = list(Entry.objects.order_by("effective_at", "id"))
    engines, flags, claims, evidence, corrections, corr_evidence = (defaultdict(list) for _ in range(6))
    for entry_id, name in Entry.engines.through.objects.values_list("entry_id", "engine__name"):
        engines[entry_id].append(name)
    for f in FlagChange.objects.order_by("entry_id", "position", "id"):
        flags[f.entry_id].append(f)
    claim_by_pk = {}
    for c in Claim.objects.select_related("engine").order_by("entry_id", "position", "id"):
        claims[c.entry_id].append(c)
        claim_by_pk[c.pk] = c
    for ev in EvidenceLink.objects.order_by("id"):
        (evidence[ev.entry_id] if ev.entry_id else corr_evidence[ev.correction_id]).append(ev)
    for c in Correction.objects.order_by("corrected_at", "id"):
        c.claim = claim_by_pk.get(c.claim_id) if c.claim_id else None
        c.ex_evidence = corr_evidence[c.pk]
        corrections[c.entry_id].append(c)
    for e in entries:
        e.ex_engines, e.ex_flags, e.ex_claims = sorted(engines[e.pk]), flags[e.pk], claims[e.pk]
        e.ex_evidence, e.ex_corrections = evidence[e.pk], corrections[e.pk]
    return entries


def export_markdown():
    parts = ["# SparkOps change log\n"]
    parts += [_entry_markdown(e) for e in _entries_for_export()]
    return "\n".join(parts)


def _entry_markdown(e):
    lines = [f"## {format_when(e.effective_at)} · {e.title}"]
    lines += [f"Engines: {', '.join(e.ex_engines)}"] if e.ex_engines else []
    lines += [f"Units: {e.units}"] if e.units else []
    lines.append(f"Kind: {e.kind}")
    lines += [f"Flag: {f}" for f in e.ex_flags]
    lines += [f"Reason: {e.reason}"] if e.reason else []
    lines += [f"Expected: {e.expected_effect}"] if e.expected_effect else []
    for c in e.ex_claims:
        lines.append(f"Claim: {c.text}")
        if c.has_prediction:
            lines.append(f"Prediction: {_prediction_text(c)}")
    lines += [f"Evidence: {_evidence_text(ev)}" for ev in e.ex_evidence]
    lines += ["", e.body_md] if e.body_md else []
    for c in e.ex_corrections:
        lines += ["", *_correction_markdown(c)]
    return "\n".join(lines) + "\n"


def _prediction_text(c):
    return str(Prediction(c.metric, c.predicted, c.window, c.engine.name if c.engine_id else None))


def _evidence_text(ev):
    return str(EvidenceLine(ev.kind, ev.url, ev.ref_id, ev.window_start, ev.window_end))


def _correction_markdown(c):
    opts = ([f"claim {c.claim.position + 1}"] if c.claim_id else []) + ([c.mark] if c.mark else [])
    head = f"Correction {format_when(c.corrected_at)}" + (f" ({', '.join(opts)})" if opts else "") + ":"
    first, *more = c.text_md.split("\n")
    out = [f"> {head} {first}"] + [f"> {line}" if line else ">" for line in more]
    return out + [f"> Evidence: {_evidence_text(ev)}" for ev in c.ex_evidence]


def export_json():
    return json.dumps([_entry_json(e) for e in _entries_for_export()], indent=2, ensure_ascii=False) + "\n"


def _entry_json(e):
    return {
        "id": e.pk,
        "effective_at": e.effective_at.isoformat(),
        "title": e.title,
        "kind": e.kind,
        "engines": e.ex_engines,
        "units": e.units,
        "body_md": e.body_md,
        "reason": e.reason,
        "expected_effect": e.expected_effect,
        "author": e.author_name,
        "created_at": e.created_at.isoformat(),
        "flags": [{"flag": f.flag, "old": f.old, "new": f.new} for f in e.ex_flags],
        "claims": [
            {
                "position": c.position + 1,
                "text": c.text,
                "metric": c.metric or None,
                "predicted": c.predicted,
                "window": c.window,
                "engine": c.engine.name if c.engine_id else None,
            }
            for c in e.ex_claims
        ],
        "evidence": [_evidence_text(ev) for ev in e.ex_evidence],
        "corrections": [
            {
                "corrected_at": c.corrected_at.isoformat(),
                "claim": c.claim.position + 1 if c.claim_id else None,
                "mark": c.mark or None,
                "text_md": c.text_md,
                "author": c.author_name,
                "evidence": [_evidence_text(ev) for ev in c.ex_evidence],
            }
            for c in e.ex_corrections
        ],
    }
