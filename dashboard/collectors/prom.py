"""Prometheus text, parsed with prometheus_client's parser — but only the families asked for.

A busy vLLM /metrics is thousands of lines of histograms nobody charts; dropping the
lines of unwanted families before the parser sees them is most of the CPU saved
(the poll-overhead bench depends on it)."""
import math
import re

from prometheus_client.parser import text_string_to_metric_families

from dashboard.http import BadBody

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*")
_SUFFIXES = ("", "_total", "_bucket", "_count", "_sum")


def wanted_names(families):
    """Every sample name a family can expose (counter `_total`, histogram parts)."""
    return frozenset(f"{fam}{suffix}" for fam in families for suffix in _SUFFIXES)


def looks_like_prometheus(text):
    head = text.lstrip()[:512]
    if not head:
        return True  # an empty exposition is valid (e.g. vLLM before any engine metric)
    if head.startswith("<") or head.startswith("{") or head.startswith("["):
        return False
    first = head.splitlines()[0]
    return first.startswith("#") or bool(_NAME.match(first))


def parse(text, names):
    """Return {sample_name: [(labels, value), ...]} for the wanted sample names.

    NaN and ±Inf values are dropped (except histogram `+Inf` buckets, whose *label* is
    infinite, not the value). Raises BadBody when the text is not Prometheus text."""
    if not looks_like_prometheus(text):
        raise BadBody("not Prometheus text (looks like HTML or JSON)")
    out = {}
    for line in text.splitlines():
        if not line or line[0] == "#" or _line_name(line) not in names:
            continue
        name, labels, value = _sample(line)
        if math.isfinite(value):
            out.setdefault(name, []).append((labels, value))
    return out


# A sample's identity (`name{labels}`) is the same poll after poll; only its value moves. The
# parser reads each identity once (prometheus_client's label parsing is most of a poll's
# CPU); later lines with it parse only their value. Bounded: an engine whose label values
# churn refills it, never grows it past _KNOWN_MAX.
_KNOWN_MAX = 20000
_known = {}


def _sample(line):
    """(name, labels, value) of one sample line, through prometheus_client's parser the first
    time its `name{labels}` is seen."""
    end = line.rfind("}")
    if end == -1:
        head, _, rest = line.partition(" ")
    else:
        head, rest = line[:end + 1], line[end + 1:]
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
        raise BadBody(f"not Prometheus text: {str(exc)[:120]}") from None
    if len(samples) != 1:
        raise BadBody(f"not Prometheus text: {line[:120]!r}")
    sample = samples[0]
    if len(_known) >= _KNOWN_MAX:
        _known.clear()
    _known[head] = (sample.name, sample.labels)
    return sample.name, dict(sample.labels), float(sample.value)


def _line_name(line):
    end = len(line)
    for sep in ("{", " ", "\t"):
        idx = line.find(sep)
        if idx != -1 and idx < end:
            end = idx
    return line[:end]


def total(samples, name, **match):
    """Sum of a sample over label sets that match `match` (None when absent)."""
    rows = samples.get(name)
    if not rows:
        return None
    values = [v for labels, v in rows if all(labels.get(k) == val for k, val in match.items())]
    return sum(values) if values else None


def first_labels(samples, name):
    rows = samples.get(name)
    return rows[0][0] if rows else None


def buckets(samples, name):
    """Cumulative histogram buckets {le: count}, summed over label sets (engines, models)."""
    out = {}
    for labels, value in samples.get(f"{name}_bucket", ()):
        try:
            le = float(labels.get("le", "nan"))
        except ValueError:
            continue
        if not math.isnan(le):
            out[le] = out.get(le, 0.0) + value
    return out


def quantile(q, delta):
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


def delta_buckets(now, before):
    """now - before per bucket; None when a bucket went down (a restart)."""
    if not before:
        return None
    out = {}
    for le, value in now.items():
        diff = value - before.get(le, 0.0)
        if diff < 0:
            return None
        out[le] = diff
    return out
