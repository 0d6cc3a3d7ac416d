"""Soak: a multi-thousand-token generation, its text saved, read for late-onset degeneration (an IQ2
model wrote ~11,500 healthy tokens, then 13 KB of hex). Two signs: an n-gram of words that repeats,
counted only when it holds at least 4 distinct alphanumeric words (a Markdown table's `| --- |` rows
repeat harmlessly), and a run of non-language (hex, one repeated character). The onset is reported
as a token index (from the stream's chunk boundaries)."""

from __future__ import annotations

import bisect
import re
from collections import defaultdict

from .session import case

NGRAM = 8
MIN_DISTINCT_ALNUM = 4
MIN_REPEATS = 4
HEX_RUN = re.compile(r"(?:\b[0-9a-fA-F]{4,}\b[\s,;:]*){24,}|[0-9a-fA-F]{256,}")
CHAR_RUN = re.compile(r"(\S)(?:\s?\1){99,}")
_ALNUM = re.compile(r"[A-Za-z0-9]")
PROMPT = (
    "Write a long, original essay about how lighthouses were built, lit and kept, and about the people who "
    "kept them. Cover the history, the engineering, daily life and the end of the keepers' era. Write at "
    "least {words} words of continuous prose; do not stop early."
)


def degeneration(text: str) -> dict | None:
    """The earliest sign of degeneration in TEXT: {"kind", "offset", "sample"}; None when clean."""
    found = []
    for kind, pattern in (("hex", HEX_RUN), ("char", CHAR_RUN)):
        m = pattern.search(text)
        if m:
            found.append((m.start(), kind, m.group(0)[:120]))
    loop = _repeated_ngram(text)
    if loop:
        found.append(loop)
    if not found:
        return None
    offset, kind, sample = min(found)
    return {"kind": kind, "offset": offset, "sample": sample}


def _repeated_ngram(text):
    words = [(m.start(), m.group(0)) for m in re.finditer(r"\S+", text)]
    seen: dict[tuple, list[int]] = defaultdict(list)
    for i in range(len(words) - NGRAM + 1):
        gram = tuple(w.lower() for _, w in words[i : i + NGRAM])
        if len({w for w in gram if _ALNUM.search(w)}) < MIN_DISTINCT_ALNUM:
            continue
        starts = seen[gram]
        if starts and i - starts[-1] < NGRAM:  # overlapping itself: one long repeat, not several
            continue
        starts.append(i)
        if len(starts) >= MIN_REPEATS:
            first = words[starts[0]][0]
            return first, "repeat", " ".join(gram)
    return None


def onset_token(result, offset: int) -> int:
    """The token index where content character OFFSET was streamed (reasoning tokens first)."""
    chunk = bisect.bisect_right(result.content_ends, offset)
    total = len(result.content_ends) or 1
    completion = (result.usage or {}).get("completion_tokens")
    reasoning = result.reasoning_chunks
    if isinstance(completion, int) and completion > reasoning:  # several tokens per chunk (speculative decoding)
        return reasoning + round(chunk * (completion - reasoning) / total)
    return reasoning + chunk


class SoakProbe:
    def __init__(self, spec, session, salt):
        self.spec, self.session, self.salt = spec, session, salt

    @property
    def total(self):
        return self.spec.reps

    async def prepare(self, window):
        if window and self.spec.tokens + 200 > window:
            return f"a {self.spec.tokens:,}-token generation does not fit the engine's window of {window:,}"
        return None

    def jobs(self):
        for rep in range(self.spec.reps):
            yield self._job(rep)

    def _job(self, rep):
        async def run():
            messages = [{"role": "user", "content": PROMPT.format(words=int(self.spec.tokens * 0.7))}]
            extra = {} if self.spec.engine_kind == "llamacpp" else {"min_tokens": self.spec.tokens}
            result = await self.session.send(messages, max_tokens=self.spec.tokens, extra=extra)
            found = degeneration(result.content) if result.bucket is None else None
            detail = {"chars": len(result.content)}
            if found:
                detail.update(found, onset_token=onset_token(result, found["offset"]))
            verdict = "" if result.bucket else ("degenerate" if found else "clean")
            return case(result, label=f"rep {rep + 1}", rep=rep, verdict=verdict, detail=detail, keep_text=True)

        return run

    def summarize(self, cases):
        ok = [c for c in cases if c["ok"]]
        bad = [c for c in ok if c["verdict"] == "degenerate"]
        onsets = [c["detail"].get("onset_token") for c in bad]
        passed = bool(ok) and not bad
        if bad:
            first = min(bad, key=lambda c: c["detail"]["onset_token"])
            headline = f"degenerate in {len(bad)}/{len(cases)} ({first['detail']['kind']} from token {first['detail']['onset_token']:,})"
        else:
            headline = f"clean {len(ok)}/{len(cases)}"
        return {
            "kind": "soak",
            "tokens": self.spec.tokens,
            "generated": [c["completion_tokens"] for c in ok],
            "degenerate": len(bad),
            "onsets": onsets,
            "passed": passed,
            "headline": headline,
        }
