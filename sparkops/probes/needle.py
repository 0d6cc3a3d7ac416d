"""Needle with decoys: an un-inferable fact at each depth of a haystack built to a token target with
the engine's own tokenizer, and N decoys sharing its anchor phrase at other depths; the answer is
scored in code. HIT: the needle's value and no decoy's. DECOY: one decoy's value (which one is kept).
AMBIGUOUS: several values (an answer that repeats the haystack is not a HIT). MISS: none of them.
A request that failed (a 400 over the window, a timeout) is in its bucket, never a MISS."""

from __future__ import annotations

import random
import statistics
import string
from collections import Counter
from typing import TypedDict

from . import haystack
from .session import case

QUALIFIERS = ("north", "south", "east", "west", "upper", "lower", "inner", "outer", "old")
NAMES = ("Heron", "Marten", "Osprey", "Lynx", "Badger", "Plover", "Otter", "Curlew")
HEAD = "Read the document below. It contains facts that cannot be guessed; answer only from it.\n\n<document>\n"
TAIL = "\n</document>\n\nWhat is the access code for the {qual} {name} vault? Reply with the code only, as written."
ANSWER_TOKENS = 256  # room for a thinking model to answer; less when the window is small
MIN_ANSWER_TOKENS = 32
VERDICTS = ("HIT", "DECOY", "AMBIGUOUS", "MISS")
WORST_FIRST = ("MISS", "DECOY", "AMBIGUOUS", "HIT")  # a tie in a cell reads as the worse verdict


def fact(qual, name, value):
    return f"The access code for the {qual} {name} vault is {value}."


def score(answer: str, needle: str, decoys: list[str]) -> tuple[str, int | None]:
    """(verdict, index of the decoy answered or None)."""
    text = (answer or "").upper()
    has_needle = needle.upper() in text
    found = [i for i, value in enumerate(decoys) if value.upper() in text]
    if has_needle and not found:
        return "HIT", None
    if has_needle or len(found) > 1:
        return "AMBIGUOUS", None
    if found:
        return "DECOY", found[0]
    return "MISS", None


def decoy_depths(depth: int, n: int) -> list[float]:
    """Spread the decoys evenly around the needle's depth (never at it)."""
    return [round((depth + 100.0 * k / (n + 1)) % 100.0, 1) for k in range(1, n + 1)]


class Decoy(TypedDict):
    """A fact like the needle's, with another qualifier and value, at its own depth (percent)."""

    qual: str
    value: str
    depth: float


class Layout:
    """One case's text: the needle, its decoys and where they sit."""

    def __init__(self, rng: random.Random, depth: int, decoys: int):
        quals = rng.sample(QUALIFIERS, decoys + 1)
        self.name = rng.choice(NAMES)
        self.qual = quals[0]
        values: set[str] = set()
        while len(values) < decoys + 1:
            values.add(f"{rng.randint(1000, 9999)}-{''.join(rng.choices(string.ascii_uppercase, k=2))}")
        self.values = sorted(values, key=lambda _: rng.random())
        self.depth = depth
        self.decoys: list[Decoy] = [
            {"qual": q, "value": v, "depth": d}
            for q, v, d in zip(quals[1:], self.values[1:], decoy_depths(depth, decoys))
        ]

    @property
    def value(self):
        return self.values[0]

    def render(self, units, n):
        inserts: dict[int, list[str]] = {}
        placed: list[tuple[float, str]] = [(self.depth, fact(self.qual, self.name, self.value))]
        placed += [(d["depth"], fact(d["qual"], self.name, d["value"])) for d in self.decoys]
        for depth, sentence in placed:
            inserts.setdefault(haystack.position(depth, n), []).append(sentence)
        return HEAD + haystack.build(units, n, inserts) + TAIL.format(qual=self.qual, name=self.name)


class NeedleProbe:
    def __init__(self, spec, session, salt):
        self.spec, self.session, self.salt = spec, session, salt
        self.corpora: list[dict] = []
        self.answer_tokens = ANSWER_TOKENS

    @property
    def total(self):
        return len(self.spec.depths) * self.spec.reps * (2 if self.spec.control else 1)

    async def prepare(self, window):
        room = (window - self.spec.tokens - 16) if window else ANSWER_TOKENS  # 16: the chat template's tokens
        if room < MIN_ANSWER_TOKENS:
            return (
                f"a {self.spec.tokens:,}-token haystack plus {MIN_ANSWER_TOKENS} answer tokens does not fit the "
                f"engine's window of {window:,}: it would be an HTTP 400, not a reading of retrieval"
            )
        self.answer_tokens = min(ANSWER_TOKENS, room)
        names = [(self.spec.corpus, False)] + ([(self.spec.control_corpus, True)] if self.spec.control else [])
        for name, control in names:
            units = haystack.sentences(haystack.load(name))
            probe = Layout(random.Random(f"{self.salt}:calibrate"), 50, self.spec.decoys)
            n, counted = await haystack.calibrate(
                self.session.count, units, self.spec.tokens, lambda k, p=probe, u=units: p.render(u, k)
            )
            self.corpora.append({"name": name, "control": control, "units": units, "sentences": n, "tokens": counted})
        return None

    def jobs(self):
        for c in self.corpora:
            for depth in self.spec.depths:
                for rep in range(self.spec.reps):
                    yield self._job(c, depth, rep)

    def _job(self, corpus, depth, rep):
        async def run():
            layout = Layout(random.Random(f"{self.salt}:{corpus['name']}:{depth}:{rep}"), depth, self.spec.decoys)
            text = layout.render(corpus["units"], corpus["sentences"])
            tokens = await self.session.count(text)
            result = await self.session.send([{"role": "user", "content": text}], max_tokens=self.answer_tokens)
            verdict, which = score(result.content, layout.value, [d["value"] for d in layout.decoys])
            detail = {
                "corpus": corpus["name"],
                "control": corpus["control"],
                "depth": depth,
                "haystack_tokens": tokens,
                "needle": layout.value,
                "decoys": layout.decoys,
                "decoy": None if which is None else layout.decoys[which],
            }
            label = f"{'control ' if corpus['control'] else ''}{depth}%"
            return case(result, label=label, rep=rep, verdict=verdict if result.bucket is None else "", detail=detail)

        return run

    def summarize(self, cases):
        rows = []
        for c in self.corpora:
            mine = [
                x
                for x in cases
                if x["detail"].get("corpus") == c["name"] and x["detail"].get("control") == c["control"]
            ]
            cells = {str(d): cell([x for x in mine if x["detail"].get("depth") == d]) for d in self.spec.depths}
            seconds = [x["seconds"] for x in mine if x["ok"] and x["seconds"] is not None]
            counted = [x["detail"].get("haystack_tokens") for x in mine if x["detail"].get("haystack_tokens")]
            prompt = [x["prompt_tokens"] for x in mine if x["prompt_tokens"]]
            rows.append(
                {
                    "corpus": c["name"],
                    "control": c["control"],
                    "tokens": int(statistics.median(counted)) if counted else c["tokens"],
                    "prompt_tokens": int(statistics.median(prompt)) if prompt else None,
                    "cells": cells,
                    "seconds_per_case": round(statistics.median(seconds), 2) if seconds else None,
                }
            )
        main = [r for r in rows if not r["control"]]
        passed = bool(main) and all(cell["verdict"] == "HIT" for r in main for cell in r["cells"].values())
        headline = " ".join(main[0]["cells"][str(d)]["verdict"] for d in self.spec.depths) if main else ""
        return {
            "kind": "needle",
            "depths": self.spec.depths,
            "decoys": self.spec.decoys,
            "counted_by": self.session.counted_by,
            "answer_tokens": self.answer_tokens,
            "rows": rows,
            "passed": passed,
            "headline": headline,
        }


def cell(cases) -> dict:
    """One depth of one corpus: the majority verdict over its repetitions, with counts and failures."""
    verdicts = Counter(x["verdict"] for x in cases if x["ok"])
    errors = Counter(x["bucket"] for x in cases if not x["ok"])
    decoys = [x["detail"]["decoy"]["depth"] for x in cases if x["ok"] and x["verdict"] == "DECOY"]
    if verdicts:
        top = max(verdicts.values())
        verdict = next(v for v in WORST_FIRST if verdicts.get(v) == top)
    else:
        verdict = next(iter(errors), "none").upper()
    return {
        "verdict": verdict,
        "counts": dict(verdicts),
        "errors": dict(errors),
        "n": len(cases),
        "decoy_depths": sorted(set(decoys)),
        "text": f"{verdict} {verdicts.get(verdict, 0)}/{len(cases)}" if verdicts else f"{verdict} ×{len(cases)}",
    }
