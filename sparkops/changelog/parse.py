"""The change log's plain Markdown file, read into `ParsedEntry`s (their corrections with them):

    ## 2026-08-20 09:00 · Raise the window on both engines
    Engines: nemotron, q38
    Kind: flag_change
    Flag: --max-model-len: 131072 → 262144
    Claim: raising --max-model-len allocates nothing
    Prediction: concurrency 10.6 at 262144 on nemotron

    Body in Markdown.

    > Correction 2026-08-20 14:00 (claim 1, superseded): vLLM sizes window-scaled workspace
    > before the pool; the pool shrank 2.7 %.

A malformed file is refused as a whole with a `LogSyntaxError` naming its line. `importer`
writes what this reads into the database; `export` writes the same format."""

import re
from collections.abc import Container
from dataclasses import dataclass, field
from datetime import UTC, datetime

from .grammar import Prediction, fenced_lines, parse_evidence, parse_flag, parse_prediction, parse_when
from .models import Entry, FlagChange, content_hash
from .services import fingerprint_of

# The title may follow the date after ' · ' (what export writes), ' — ', ' – ', ' - ' or ': '.
HEADING = re.compile(r"^## (?P<when>\S+(?: \d{1,2}:\d{2})?)(?: · | — | – | - |: )(?P<title>\S.*?)\s*$")
CORRECTION = re.compile(
    r"^> ?Correction (?P<when>\d{4}-\d{2}-\d{2}(?: \d{2}:\d{2})?)(?: \((?P<opts>[^)]*)\))?:\s?(?P<text>.*)$"
)
HEADER = re.compile(
    r"^(?P<key>Engines|Units|Kind|Flag|Reason|Expected|Claim|Prediction|Evidence):\s?(?P<value>.*)$", re.IGNORECASE
)
# The same headers as a Markdown list, as people write them ('- Kind: claim', '* **Engines:** a, b', '- Flags: …'):
# read as headers, each noted in the dry run. 'Flags' and 'Engine' are the plurals people reach for.
BULLETED = re.compile(
    r"^\s{0,3}[-*+]\s+(?:\*\*|__)?(?P<key>Engines?|Units?|Kind|Flags?|Reason|Expected|Claims?|Predictions?|Evidence)"
    r"(?::(?:\*\*|__)|(?:\*\*|__):|:)\s?(?P<value>.*)$",
    re.IGNORECASE,
)
SINGULAR = {"engine": "Engines", "unit": "Units", "flags": "Flag", "claims": "Claim", "predictions": "Prediction"}
# A header-like line in the body (after the headers ended): said in the dry run, since it stays text.
LOOKS_LIKE_HEADER = re.compile(
    r"^\s{0,3}(?:[-*+]\s+)?(?:\*\*|__)?(?:Engines?|Units?|Kind|Flags?|Claims?|Predictions?|Evidence)(?:\*\*|__)?:",
    re.IGNORECASE,
)
SINGLE_KEYS = {"Engines", "Units", "Kind", "Reason", "Expected"}
Numbered = list[tuple[int, str]]  # (1-based line number, line) of one entry
KINDS = {**{value: value for value in Entry.Kind.values}, **{label: value for value, label in Entry.Kind.choices}}


def _kind_key(text: str) -> str:
    """'Flag-Change', 'flag change', 'FLAG_CHANGE' → 'flag_change'."""
    return re.sub(r"[\s_-]+", "_", text.strip().lower())


class LogSyntaxError(ValueError):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass
class ParsedCorrection:
    line: int
    corrected_at: datetime
    text: str
    claim: int | None = None  # 1-based, as written
    mark: str = ""
    evidence: list = field(default_factory=list)

    def fingerprint(self) -> str:
        return content_hash(
            _utc_minutes(self.corrected_at), self.claim - 1 if self.claim else None, self.mark, self.text.strip()
        )


@dataclass
class ParsedEntry:
    line: int
    effective_at: datetime
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

    def fingerprint(self) -> str:
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


def _prediction_tuple(p: Prediction | None) -> tuple[str, float | None, int | None, str | None]:
    return (p.metric, p.value, p.window, p.engine) if p else ("", None, None, None)


def _utc_minutes(value: datetime) -> str:

    return value.astimezone(UTC).isoformat(timespec="minutes")


# ---- parsing -------------------------------------------------------------------------------


def parse_log(text: str) -> list[ParsedEntry]:
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


def _parse_entry(numbered: Numbered, fenced: Container[int] = frozenset()) -> ParsedEntry:
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
    i, keys = _parse_headers(entry, rest)
    if "Kind" not in keys:
        entry.kind = Entry.Kind.FLAG_CHANGE if entry.flags else Entry.Kind.DECISION
    _parse_body(entry, rest[i:], fenced)
    return entry


def _fits(what, text, limit):
    """The form's length limits hold on the import path too (an overlong title would widen the list)."""
    if len(text) > limit:
        raise ValueError(f"{what} is {len(text):,} characters; at most {limit:,} fit (move the rest into the body)")


def _when(n: int, text: str) -> datetime:
    try:
        return parse_when(text)
    except ValueError as exc:
        raise LogSyntaxError(n, str(exc)) from None


def _parse_headers(entry: ParsedEntry, rest: Numbered) -> tuple[int, set[str]]:
    """Where the headers end in REST, and the keys they named (capitalized). Blank lines before a
    list of headers are skipped (a Markdown list is often set off from the heading by one)."""
    seen: set[str] = set()
    start = next((i for i, (_n, line) in enumerate(rest) if line.strip()), len(rest))
    if start == len(rest) or not BULLETED.match(rest[start][1]):
        start = 0
    noted = False
    for i, (n, line) in enumerate(rest[start:], start):
        m = _header(line)
        if not m:
            return i, seen
        key, value, bulleted = m
        if bulleted and not noted:
            entry.notes.append((n, "headers written as a list ('- Kind:', '- Engines:' …) are read as headers"))
            noted = True
        if key in SINGLE_KEYS and key in seen:
            raise LogSyntaxError(n, f"'{key}:' appears twice in one entry")
        seen.add(key)
        if key == "Flag" and bulleted and ";" in value:  # '- Flags: --a: 1 → 2; --b: x → y'
            for one in value.split(";"):
                if one.strip():
                    _apply_header(entry, n, key, one.strip())
            continue
        _apply_header(entry, n, key, value)
    return len(rest), seen


def _header(line: str) -> tuple[str, str, bool] | None:
    """(key, value, written as a list item) of a header line, or None for a line of the body."""
    m = HEADER.match(line)
    if m:
        return m["key"].capitalize(), m["value"].strip(), False
    m = BULLETED.match(line)
    if m:
        key = m["key"].lower()
        return SINGULAR.get(key, key.capitalize()), m["value"].strip(), True
    return None


def _apply_header(entry: ParsedEntry, n: int, key: str, value: str) -> None:
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


def _parse_body(entry: ParsedEntry, rest: Numbered, fenced: Container[int] = frozenset()) -> None:
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
            if LOOKS_LIKE_HEADER.match(line):
                entry.notes.append(
                    (n, f"'{line.strip()[:60]}' is in the body, not a header: headers come right under the '## ' line")
                )
            body.append(line)
    entry.body = _clean_text("\n".join(body))
    for c in entry.corrections:
        c.text = _clean_text(c.text)
        if not c.text.strip():
            raise LogSyntaxError(c.line, "a correction needs text after the colon")


def _note_after(entry: ParsedEntry, n: int, line: str, correction: ParsedCorrection | None) -> ParsedCorrection | None:
    """Text below a correction's blockquote is the entry's body (export writes it above the
    corrections); say so once per correction. Returns the correction still to report."""
    if correction is None or not line.strip():
        return correction
    entry.notes.append((n, f"text after the correction of line {correction.line} is kept as the entry's body"))
    return None


def _clean_text(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


def _start_correction(entry: ParsedEntry, n: int, m: re.Match[str]) -> ParsedCorrection:
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


def _continue_correction(correction: ParsedCorrection, n: int, text: str) -> None:
    if text.startswith("Evidence: "):
        try:
            correction.evidence.append(parse_evidence(text.removeprefix("Evidence: ")))
        except ValueError as exc:
            raise LogSyntaxError(n, str(exc)) from None
    elif correction.evidence:
        raise LogSyntaxError(n, "a correction's 'Evidence:' lines come after its text")
    else:
        correction.text += "\n" + text
