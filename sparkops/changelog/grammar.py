"""Line grammars shared by the web forms and the Markdown import, so one flag line means the
same thing in both places. Each parser returns a value or raises ValueError with a message
fit to show the user."""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.utils import timezone

ARROWS = ("→", "->")
_FLAG = re.compile(r"^(?P<flag>-{0,2}[A-Za-z0-9][\w.-]*)\s*:\s*(?P<old>.*?)\s*(?:→|->)\s*(?P<new>.*)$")
_PREDICTION = re.compile(
    r"^(?P<metric>[a-z_]+)\s+(?P<value>[0-9][0-9,]*(?:\.[0-9]+)?)\s*×?"
    r"(?:\s+at\s+(?P<window>[0-9][0-9,]*))?(?:\s+on\s+(?P<engine>\S+))?$"
)
METRICS = ("concurrency", "pool_tokens", "kv_memory_gib", "tokens_per_gib")
MAX_REF_ID = 2**31 - 1  # EvidenceLink.ref_id is a PositiveIntegerField: its range on every database
EVIDENCE_PREFIXES = {"run": "benchmark_run", "alert": "alert_event", "chart": "chart_window"}


@dataclass
class FlagLine:
    flag: str
    old: str
    new: str

    def __str__(self) -> str:
        return f"{self.flag}: {self.old} → {self.new}"


def parse_flag(text: str) -> FlagLine:
    """'--max-model-len: 131072 → 262144' (or '->'); MAX_JOBS or a unit's Restart too."""
    m = _FLAG.match(text.strip())
    if not m:
        raise ValueError(f"a flag change reads '--name: old → new', got {text.strip()!r}")
    return FlagLine(m["flag"], m["old"], m["new"])


def parse_flags(text: str) -> list[FlagLine]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append(parse_flag(line))
            except ValueError as exc:
                raise ValueError(f"line {n}: {exc}") from None
    return out


@dataclass
class Prediction:
    metric: str
    value: float
    window: int | None = None
    engine: str | None = None

    def __str__(self) -> str:
        text = f"{self.metric} {format_number(self.value)}"
        text += f" at {self.window}" if self.window else ""
        return text + (f" on {self.engine}" if self.engine else "")


def format_number(value: float) -> str:
    """Plain digits that read back as the same float: never an exponent (which the grammar
    does not read: '1.2e+06' was refused on import), never rounded to 6 digits as :g does."""

    if float(value).is_integer() and abs(value) < 1e16:
        return str(int(value))
    return format(Decimal(repr(float(value))), "f")


def parse_prediction(text: str) -> Prediction:
    """'concurrency 10.6 at 262144 on nemotron' — metric, value, optional window and engine."""
    m = _PREDICTION.match(text.strip())
    if not m:
        raise ValueError(f"a prediction reads 'METRIC VALUE [at WINDOW] [on ENGINE]', got {text.strip()!r}")
    if m["metric"] not in METRICS:
        raise ValueError(f"unknown metric {m['metric']!r}; use one of {', '.join(METRICS)}")
    window = int(m["window"].replace(",", "")) if m["window"] else None
    return Prediction(m["metric"], float(m["value"].replace(",", "")), window, m["engine"])


@dataclass
class EvidenceLine:
    kind: str
    url: str = ""
    ref_id: int | None = None
    window_start: datetime | None = None
    window_end: datetime | None = None

    def __str__(self) -> str:
        if self.kind == "url":
            return self.url
        if self.kind == "chart_window":
            return f"chart:{self.window_start:%Y-%m-%dT%H:%M}/{self.window_end:%Y-%m-%dT%H:%M}"
        prefix = {v: k for k, v in EVIDENCE_PREFIXES.items()}[self.kind]
        return f"{prefix}:{self.ref_id}"


def parse_evidence(text: str) -> EvidenceLine:
    """'https://…', 'run:12', 'alert:7' or 'chart:2026-08-20T09:00/2026-08-20T10:00'."""
    text = text.strip()
    prefix, _, rest = text.partition(":")
    if text.startswith(("http://", "https://")):
        return EvidenceLine("url", url=text)
    if prefix in ("run", "alert") and rest.isdigit():
        if not 1 <= int(rest) <= MAX_REF_ID:
            raise ValueError(f"{prefix}:ID takes an id from 1 to {MAX_REF_ID}, got {text!r}")
        return EvidenceLine(EVIDENCE_PREFIXES[prefix], ref_id=int(rest))
    if prefix == "chart" and "/" in rest:
        start, end = (parse_when(part.replace("T", " ")) for part in rest.split("/", 1))
        if end <= start:
            raise ValueError("a chart window must end after it starts")
        return EvidenceLine("chart_window", window_start=start, window_end=end)
    raise ValueError(f"evidence is a URL, run:ID, alert:ID or chart:START/END, got {text!r}")


def parse_evidence_lines(text: str) -> list[EvidenceLine]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append(parse_evidence(line))
            except ValueError as exc:
                raise ValueError(f"line {n}: {exc}") from None
    return out


_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})")


def fenced_lines(lines: Sequence[str]) -> tuple[set[int], int | None]:
    """(1-based numbers of the lines inside fenced code blocks, fence lines included; the line
    of a fence never closed, or None). CommonMark's fences: ``` or ~~~ (three or more, up to
    three spaces in), closed by a run of the same character at least as long."""
    inside: set[int] = set()
    fence: str | None = None
    opened_at: int | None = None
    for n, line in enumerate(lines, 1):
        m = _FENCE.match(line)
        if fence is None:
            if m and not (m["fence"][0] == "`" and "`" in line[m.end() :]):
                fence, opened_at = m["fence"], n
                inside.add(n)
            continue
        inside.add(n)
        if m and m["fence"][0] == fence[0] and len(m["fence"]) >= len(fence) and not line[m.end() :].strip():
            fence = None
    return inside, (opened_at if fence is not None else None)


def parse_when(text: str) -> datetime:
    """'YYYY-MM-DD' or 'YYYY-MM-DD HH:MM' in the site's time zone."""
    text = text.strip()
    for fmt in ("%Y-%m-%d %H:%M", "%Y-%m-%d"):
        try:
            return timezone.make_aware(datetime.strptime(text, fmt))
        except ValueError:
            continue
    raise ValueError(f"a date reads YYYY-MM-DD or YYYY-MM-DD HH:MM, got {text!r}")


def format_when(value: datetime) -> str:
    local = timezone.localtime(value)
    return f"{local:%Y-%m-%d}" if (local.hour, local.minute) == (0, 0) else f"{local:%Y-%m-%d %H:%M}"
