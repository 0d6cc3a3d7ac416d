"""Prometheus text, parsed with prometheus_client's parser — but only the families asked for,
and within limits, as Prometheus bounds a scrape.

A busy vLLM /metrics is thousands of lines of histograms nobody charts; dropping the
lines of unwanted families before the parser sees them is most of the CPU saved.

The limits are Prometheus' own (`sample_limit`, `label_limit`, `label_name_length_limit`,
`label_value_length_limit`; the body size is capped by dashboard/http.py), checked before
a line reaches the parser where that can be told from the line's length: the parser's time
grows much faster than a line's labels, so one engine's pathological line must be refused
before the parser sees it, or every other engine of the tick waits for it. A scrape that
breaks a limit fails with the limit it broke as its reason."""

import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Self

from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from dashboard.http import BadBody


@dataclass(frozen=True)
class Limits:
    sample_limit: int = 20000  # wanted samples in one scrape
    label_limit: int = 64  # labels on one sample
    label_name_length_limit: int = 128
    label_value_length_limit: int = 2048
    parse_time_limit_s: float = 1.0  # CPU time one scrape may spend in the parser

    @classmethod
    def from_settings(cls) -> Self:
        return cls(
            settings.SPARKOPS_SCRAPE_SAMPLE_LIMIT,
            settings.SPARKOPS_SCRAPE_LABEL_LIMIT,
            settings.SPARKOPS_SCRAPE_LABEL_NAME_LENGTH_LIMIT,
            settings.SPARKOPS_SCRAPE_LABEL_VALUE_LENGTH_LIMIT,
            settings.SPARKOPS_SCRAPE_PARSE_TIME_LIMIT_S,
        )

    @property
    def line_limit(self) -> int:
        """The longest sample line these limits allow (name, labels, value and timestamp)."""
        return 256 + self.label_limit * (self.label_name_length_limit + self.label_value_length_limit + 4)


Labels = dict[str, str]
# Cumulative histogram buckets: {upper bound `le`: count}.
Buckets = dict[float, float]


class Samples(dict[str, list[tuple[Labels, float]]]):
    """{sample name: [(labels, value), ...]}, and the wanted samples whose value was NaN or ±Inf."""

    def __init__(self) -> None:
        super().__init__()
        self.non_finite: list[str] = []

    def why_empty(self, prefix: str) -> str | None:
        """The reason a scrape that parsed holds none of the wanted samples."""
        if self.non_finite:
            shown = ", ".join(self.non_finite[:3]) + (" …" if len(self.non_finite) > 3 else "")
            return f"every {prefix}* sample is NaN or ±Inf ({shown})"
        return None


_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*")
_SUFFIXES = ("", "_total", "_bucket", "_count", "_sum")


def wanted_names(families: Iterable[str]) -> frozenset[str]:
    """Every sample name a family can expose (counter `_total`, histogram parts)."""
    return frozenset(f"{fam}{suffix}" for fam in families for suffix in _SUFFIXES)


def looks_like_prometheus(text: str) -> bool:
    head = text.lstrip()[:512]
    if not head:
        return True  # an empty exposition is valid (e.g. vLLM before any engine metric)
    if head.startswith("<") or head.startswith("{") or head.startswith("["):
        return False
    first = head.splitlines()[0]
    return first.startswith("#") or bool(_NAME.match(first))


def parse(text: str, names: frozenset[str] | set[str], *, limits: Limits | None = None, url: str = "") -> Samples:
    """Return {sample_name: [(labels, value), ...]} (a `Samples`) for the wanted sample names.

    NaN and ±Inf values are dropped and named in `non_finite` (except histogram `+Inf`
    buckets, whose *label* is infinite, not the value). Raises BadBody when the text is not
    Prometheus text, is cut short, or breaks one of LIMITS (default: the settings)."""
    limits = limits or Limits.from_settings()
    if not looks_like_prometheus(text):
        raise BadBody("not Prometheus text (looks like HTML or JSON)", url=url)
    if text and not text.endswith("\n"):
        raise BadBody("Prometheus text cut short (its last line has no newline)", url=url)
    out, count = Samples(), 0
    started, line_limit = time.thread_time(), limits.line_limit
    for line in text.splitlines():
        if not line or line[0] == "#" or _line_name(line) not in names:
            continue
        count += 1
        if count > limits.sample_limit:
            raise BadBody(f"sample_limit exceeded (over {limits.sample_limit} wanted samples)", url=url)
        if len(line) > line_limit or line.count('="') > limits.label_limit:
            raise BadBody(
                f"label limits exceeded: a {_line_name(line)} line of {len(line)} characters "
                f"with about {line.count('=')} labels (label_limit {limits.label_limit})",
                url=url,
            )
        if not count % 256 and time.thread_time() - started > limits.parse_time_limit_s:
            raise BadBody(f"parse time limit exceeded ({limits.parse_time_limit_s:g} s of CPU)", url=url)
        name, labels, value = _sample(line, limits, url)
        if math.isfinite(value):
            out.setdefault(name, []).append((labels, value))
        else:
            out.non_finite.append(f"{name}={value}")
    return out


# A sample's identity (`name{labels}`) is the same poll after poll; only its value moves. The
# parser reads each identity once (prometheus_client's label parsing is most of a poll's
# CPU); later lines with it parse only their value. Bounded: an engine whose label values
# churn refills it, never grows it past _KNOWN_MAX.
_KNOWN_MAX = 20000
_known: dict[str, tuple[str, dict[str, str]]] = {}


def _sample(line: str, limits: Limits, url: str = "") -> tuple[str, Labels, float]:
    """(name, labels, value) of one sample line, through prometheus_client's parser the first
    time its `name{labels}` is seen (and its labels checked against LIMITS then)."""
    end = line.rfind("}")
    if end == -1:
        head, _, rest = line.partition(" ")
    else:
        head, rest = line[: end + 1], line[end + 1 :]
    known = _known.get(head)
    fields = rest.split()
    if known is not None and len(fields) in (1, 2):
        try:
            return known[0], known[1], float(fields[0])
        except ValueError:
            pass  # let the parser say what is wrong with it
    try:
        samples = [s for family in text_string_to_metric_families(line + "\n") for s in family.samples]
    except (ValueError, TypeError, IndexError) as exc:
        raise BadBody(f"not Prometheus text: {str(exc)[:120]}", url=url) from None
    if len(samples) != 1:
        raise BadBody(f"not Prometheus text: {line[:120]!r}", url=url)
    sample = samples[0]
    _check_labels(sample, limits, url)
    if len(_known) >= _KNOWN_MAX:
        _known.clear()
    _known[head] = (sample.name, sample.labels)
    return sample.name, dict(sample.labels), float(sample.value)


def _check_labels(sample: Sample, limits: Limits, url: str) -> None:
    if len(sample.labels) > limits.label_limit:
        raise BadBody(
            f"label_limit exceeded ({len(sample.labels)} labels on {sample.name} > {limits.label_limit})", url=url
        )
    for key, value in sample.labels.items():
        if len(key) > limits.label_name_length_limit:
            raise BadBody(
                f"label_name_length_limit exceeded ({len(key)} characters > "
                f"{limits.label_name_length_limit}) on {sample.name}",
                url=url,
            )
        if len(value) > limits.label_value_length_limit:
            raise BadBody(
                f"label_value_length_limit exceeded (label {key[:40]} of {len(value)} characters > "
                f"{limits.label_value_length_limit}) on {sample.name}",
                url=url,
            )


def _line_name(line: str) -> str:
    end = len(line)
    for sep in ("{", " ", "\t"):
        idx = line.find(sep)
        if idx != -1 and idx < end:
            end = idx
    return line[:end]


def total(samples: Samples, name: str, **match: str) -> float | None:
    """Sum of a sample over label sets that match `match` (None when absent)."""
    rows = samples.get(name)
    if not rows:
        return None
    values = [v for labels, v in rows if all(labels.get(k) == val for k, val in match.items())]
    return sum(values) if values else None


def first_labels(samples: Samples, name: str) -> Labels | None:
    rows = samples.get(name)
    return rows[0][0] if rows else None


def buckets(samples: Samples, name: str) -> Buckets:
    """Cumulative histogram buckets {le: count}, summed over label sets (engines, models)."""
    out: Buckets = {}
    for labels, value in samples.get(f"{name}_bucket", ()):
        try:
            le = float(labels.get("le", "nan"))
        except ValueError:
            continue
        if not math.isnan(le):
            out[le] = out.get(le, 0.0) + value
    return out


def quantile(q: float, delta: Buckets | None) -> float | None:
    """Prometheus histogram_quantile over delta buckets {le: cumulative count}; None if empty."""
    if not delta:
        return None
    bounds = sorted(delta)
    count = delta[bounds[-1]]
    if count <= 0:
        return None
    rank = q * count
    prev_bound, prev_count = 0.0, 0.0
    for bound in bounds:
        cum = delta[bound]
        if cum >= rank:
            if math.isinf(bound):
                return prev_bound  # the quantile lies past the last finite bucket
            if cum == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (cum - prev_count)
        prev_bound, prev_count = bound, cum
    return prev_bound


def delta_buckets(now: Buckets, before: Buckets | None) -> Buckets | None:
    """now - before per bucket; None when a bucket went down (a restart)."""
    if not before:
        return None
    out: Buckets = {}
    for le, value in now.items():
        diff = value - before.get(le, 0.0)
        if diff < 0:
            return None
        out[le] = diff
    return out
