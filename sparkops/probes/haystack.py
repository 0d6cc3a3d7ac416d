"""Corpora and haystacks: text built to a token target counted by the engine's own tokenizer.

A corpus is a shipped name (sparkops/probes/corpora/NAME.txt) or a UTF-8 text file on the box.
Its sentences are cycled to length; inserted sentences (needles, decoys) go between them."""

from __future__ import annotations

import re
from pathlib import Path

from sparkops.benchmarks.spec import depth_tolerance

CORPORA_DIR = Path(__file__).resolve().parent / "corpora"
MAX_CORPUS_BYTES = 8 * 1024 * 1024
CALIBRATION_STEPS = 8
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


class CorpusError(Exception):
    pass


def shipped() -> list[str]:
    return sorted(p.stem for p in CORPORA_DIR.glob("*.txt"))


def load(name: str) -> str:
    """The corpus text; CorpusError says why it cannot be read."""
    path = CORPORA_DIR / f"{name}.txt" if re.fullmatch(r"[\w-]+", name or "") else Path(name)
    if not path.is_file():
        raise CorpusError(f"no corpus {name!r}: use one of {', '.join(shipped())} or the path of a text file")
    if path.stat().st_size > MAX_CORPUS_BYTES:
        raise CorpusError(f"corpus {name!r} is over {MAX_CORPUS_BYTES // (1024 * 1024)} MiB")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CorpusError(f"cannot read corpus {name!r}: {exc}") from None
    if len(sentences(text)) < 5:
        raise CorpusError(f"corpus {name!r} has fewer than 5 sentences")
    return text


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(" ".join(text.split())) if s.strip()]


def build(units: list[str], n: int, inserts: dict[int, list[str]] | None = None) -> str:
    """N corpus sentences (cycled), with INSERTS[i] placed before sentence i (i == n: at the end)."""
    inserts = inserts or {}
    out: list[str] = []
    for i in range(n + 1):
        out.extend(inserts.get(i, ()))
        if i < n:
            out.append(units[i % len(units)])
    return " ".join(out)


def position(depth_pct: float, n: int) -> int:
    return max(0, min(n, round(n * depth_pct / 100.0)))


async def calibrate(count, units: list[str], target: int, render) -> tuple[int, int]:
    """Find the number of sentences N whose rendered prompt (RENDER(N)) counts TARGET tokens on the
    engine (COUNT(text) -> tokens). Secant steps from the corpus' own tokens per sentence; returns
    (N, counted tokens)."""
    whole = await count(" ".join(units))
    per = max(0.5, whole / len(units))
    base = await count(render(0))
    n = max(1, round((target - base) / per))
    got = base
    for _ in range(CALIBRATION_STEPS):
        got = await count(render(n))
        if abs(got - target) <= depth_tolerance(target) // 2:
            break
        n = max(0, n + round((target - got) / per))
    return n, got
