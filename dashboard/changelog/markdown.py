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

from django.core.exceptions import ValidationError
from django.db import IntegrityError, OperationalError, transaction

from dashboard.engine_lifecycle import retired_record
from dashboard.models import Engine
from dashboard.models.fleet import NAME_VALIDATOR

from .grammar import fenced_lines, format_when, parse_evidence, parse_flag, parse_prediction, parse_when
from .models import DuplicateError, Entry, content_hash
from .services import correction_create, entry_create, fingerprint_of

# The title may follow the date after ' · ' (what export writes), ' — ', ' – ', ' - ' or ': '.
HEADING = re.compile(r"^## (?P<when>\S+(?: \d{1,2}:\d{2})?)(?: · | — | – | - |: )(?P<title>\S.*?)\s*$")
CORRECTION = re.compile(r"^> ?Correction (?P<when>\d{4}-\d{2}-\d{2}(?: \d{2}:\d{2})?)(?: \((?P<opts>[^)]*)\))?:\s?(?P<text>.*)$")
HEADER = re.compile(r"^(?P<key>Engines|Units|Kind|Flag|Reason|Expected|Claim|Prediction|Evidence):\s?(?P<value>.*)$",
                    re.IGNORECASE)
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
        return content_hash(_utc_minutes(self.corrected_at), self.claim - 1 if self.claim else None, self.mark,
                            self.text.strip())


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
        return fingerprint_of(effective_at=self.effective_at, title=self.title, kind=self.kind,
                              engines=self.engines, units=self.units, body=self.body, reason=self.reason,
                              expected=self.expected, flags=[(f.flag, f.old, f.new) for f in self.flags],
                              claims=claims)


def _prediction_tuple(p):
    return (p.metric, p.value, p.window, p.engine) if p else ("", None, None, None)


def _utc_minutes(value):
    from datetime import timezone as dt_tz

    return value.astimezone(dt_tz.utc).isoformat(timespec="minutes")


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
        raise LogSyntaxError(n, "an entry heading reads '## YYYY-MM-DD[ HH:MM] · title' (or ' — ', ' - ', ': ' "
                                "before the title); inside an entry use '### ', or put the line in a code fence")
    entry = ParsedEntry(line=n, effective_at=_when(n, m["when"]), title=m["title"])
    i = _parse_headers(entry, rest)
    if not any(HEADER.match(line)["key"].capitalize() == "Kind" for _, line in rest[:i]):
        entry.kind = Entry.Kind.FLAG_CHANGE if entry.flags else Entry.Kind.DECISION
    _parse_body(entry, rest[i:], fenced)
    return entry


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
            entry.flags.append(parse_flag(value))
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
            raise LogSyntaxError(n, "a correction starts '> Correction YYYY-MM-DD[ HH:MM][ (claim N, withdrawn|superseded)]: text'")
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
        text = (f"{len(self.new_entries)} new entr{'y' if len(self.new_entries) == 1 else 'ies'}, "
                f"{len(self.new_corrections)} new correction(s), {self.existing} entr"
                f"{'y' if self.existing == 1 else 'ies'} already in the log")
        if self.new_engines:
            text += f", {len(self.new_engines)} retired engine record(s) for names the log knows: "
            text += ", ".join(sorted(self.new_engines))
        return text


def plan_import(text):
    """What importing TEXT would create; raises LogSyntaxError (nothing is written)."""
    parsed = parse_log(text)
    engines = {e.name: e for e in Engine.objects.all()}
    plan, seen = ImportPlan(), {}
    for entry in parsed:
        plan.notes += entry.notes
        _check_engines(entry, engines, plan.new_engines)
        fp = entry.fingerprint()
        target = seen.get(fp) or Entry.objects.filter(fingerprint=fp).order_by("pk").first()
        if target is None:
            plan.new_entries.append(entry)
            seen[fp] = entry
            target = entry
        else:
            plan.existing += 1
        known = _known_corrections(target, plan)
        for c in entry.corrections:
            if c.fingerprint() not in known:
                plan.new_corrections.append((target, c))
                known.add(c.fingerprint())
    return plan


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


def _known_corrections(target, plan):
    if isinstance(target, Entry):
        known = {c.fingerprint() for c in target.corrections.select_related("claim")}
    else:
        known = set()
    return known | {c.fingerprint() for t, c in plan.new_corrections if t is target}


@transaction.atomic
def apply_import(plan, *, author=None, author_name="import"):
    created = {}
    engines = {e.name: e for e in Engine.objects.all()}
    for name in sorted(plan.new_engines):
        if name not in engines:
            engines[name] = retired_record(name)
    for p in plan.new_entries:
        created[id(p)] = entry_create(
            author=author, author_name=author_name, effective_at=p.effective_at, title=p.title, kind=p.kind,
            engines=[engines[n] for n in p.engines], units=p.units, body_md=p.body, reason=p.reason,
            expected_effect=p.expected, flags=p.flags, evidence=p.evidence,
            claims=[_claim_fields(c, engines) for c in p.claims])
    for target, c in plan.new_corrections:
        entry = target if isinstance(target, Entry) else created[id(target)]
        claim = entry.claims.get(position=c.claim - 1) if c.claim else None
        correction_create(entry=entry, author=author, author_name=author_name, text_md=c.text,
                          corrected_at=c.corrected_at, claim=claim, mark=c.mark, evidence=c.evidence)
    return created


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
        return {"text": claim["text"]}
    return {"text": claim["text"], "metric": p.metric, "predicted": p.value, "window": p.window,
            "engine": engines[p.engine] if p.engine else None}


# ---- export --------------------------------------------------------------------------------

def _entries_for_export():
    return (Entry.objects.order_by("effective_at", "id")
            .prefetch_related("engines", "flags", "claims__engine", "evidence", "corrections__claim",
                              "corrections__evidence"))


def export_markdown():
    parts = ["# SparkOps change log\n"]
    parts += [_entry_markdown(e) for e in _entries_for_export()]
    return "\n".join(parts)


def _entry_markdown(e):
    lines = [f"## {format_when(e.effective_at)} · {e.title}"]
    engines = sorted(x.name for x in e.engines.all())
    lines += [f"Engines: {', '.join(engines)}"] if engines else []
    lines += [f"Units: {e.units}"] if e.units else []
    lines.append(f"Kind: {e.kind}")
    lines += [f"Flag: {f}" for f in e.flags.all()]
    lines += [f"Reason: {e.reason}"] if e.reason else []
    lines += [f"Expected: {e.expected_effect}"] if e.expected_effect else []
    for c in e.claims.all():
        lines.append(f"Claim: {c.text}")
        if c.has_prediction:
            lines.append(f"Prediction: {_prediction_text(c)}")
    lines += [f"Evidence: {_evidence_text(ev)}" for ev in e.evidence.all()]
    lines += ["", e.body_md] if e.body_md else []
    for c in e.corrections.all():
        lines += ["", *_correction_markdown(c)]
    return "\n".join(lines) + "\n"


def _prediction_text(c):
    from .grammar import Prediction

    return str(Prediction(c.metric, c.predicted, c.window, c.engine.name if c.engine_id else None))


def _evidence_text(ev):
    from .grammar import EvidenceLine

    return str(EvidenceLine(ev.kind, ev.url, ev.ref_id, ev.window_start, ev.window_end))


def _correction_markdown(c):
    opts = ([f"claim {c.claim.position + 1}"] if c.claim_id else []) + ([c.mark] if c.mark else [])
    head = f"Correction {format_when(c.corrected_at)}" + (f" ({', '.join(opts)})" if opts else "") + ":"
    first, *more = c.text_md.split("\n")
    out = [f"> {head} {first}"] + [f"> {line}" if line else ">" for line in more]
    return out + [f"> Evidence: {_evidence_text(ev)}" for ev in c.evidence.all()]


def export_json():
    return json.dumps([_entry_json(e) for e in _entries_for_export()], indent=2, ensure_ascii=False) + "\n"


def _entry_json(e):
    return {
        "id": e.pk, "effective_at": e.effective_at.isoformat(), "title": e.title, "kind": e.kind,
        "engines": sorted(x.name for x in e.engines.all()), "units": e.units, "body_md": e.body_md,
        "reason": e.reason, "expected_effect": e.expected_effect, "author": e.author_name,
        "created_at": e.created_at.isoformat(),
        "flags": [{"flag": f.flag, "old": f.old, "new": f.new} for f in e.flags.all()],
        "claims": [{"position": c.position + 1, "text": c.text, "metric": c.metric or None, "predicted": c.predicted,
                    "window": c.window, "engine": c.engine.name if c.engine_id else None} for c in e.claims.all()],
        "evidence": [_evidence_text(ev) for ev in e.evidence.all()],
        "corrections": [{"corrected_at": c.corrected_at.isoformat(), "claim": c.claim.position + 1 if c.claim_id else None,
                         "mark": c.mark or None, "text_md": c.text_md, "author": c.author_name,
                         "evidence": [_evidence_text(ev) for ev in c.evidence.all()]} for c in e.corrections.all()],
    }
