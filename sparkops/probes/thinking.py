"""Thinking settings: with thinking off the reply has content and no reasoning tokens; a
`reasoning_effort` the probe sends must change the reasoning token count, else "inert" (llama.cpp
#20408: a 2 % change); "inverted" when an effort sent with thinking off turns thinking back on (vLLM:
2,955 -> 0 characters of content). Four arms per repetition, in this order."""

from __future__ import annotations

import statistics

from .session import case

PROMPT = "In three sentences: why does a lighthouse lens use rings of prisms instead of one large lens?"
ARMS = {
    "off": {"chat_template_kwargs": {"enable_thinking": False}},
    "off+effort": {"chat_template_kwargs": {"enable_thinking": False}, "reasoning_effort": "high"},
    "on+low": {"chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": "low"},
    "on+high": {"chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": "high"},
}
INERT_SHARE = 0.10  # high vs low differing by less than this share of the larger is "no effect"
ORDER = ("inverted", "off_reasons", "off_empty", "inert")


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def verdict(arms: dict) -> tuple[str, list[str]]:
    """(verdict, every finding) from the arms' medians."""
    found = []
    off, inv, low, high = (arms.get(k) or {} for k in ARMS)
    if (inv.get("reasoning") or 0) > 0:
        found.append("inverted")
    if (off.get("reasoning") or 0) > 0:
        found.append("off_reasons")
    if off and not off.get("content_chars"):
        found.append("off_empty")
    lo, hi = low.get("reasoning") or 0, high.get("reasoning") or 0
    if abs(hi - lo) < INERT_SHARE * max(hi, lo) or max(hi, lo) == 0:
        found.append("inert")
    return (found[0] if found else "ok"), found


class ThinkingProbe:
    def __init__(self, spec, session, salt):
        self.spec, self.session, self.salt = spec, session, salt

    @property
    def total(self):
        return self.spec.reps * len(ARMS)

    async def prepare(self, window):  # noqa: ARG002 (the probes' prepare signature)
        return None

    def jobs(self):
        for rep in range(self.spec.reps):
            for arm in ARMS:
                yield self._job(arm, rep)

    def _job(self, arm, rep):
        async def run():
            messages = [{"role": "user", "content": PROMPT}]
            result = await self.session.send(messages, max_tokens=self.spec.tokens, extra=ARMS[arm])
            out = case(result, label=arm, rep=rep)
            out["detail"] = {"arm": arm, "content_chars": len(result.content), "sent": ARMS[arm]}
            if result.bucket is None:
                out["verdict"] = f"reasoning {out['reasoning_tokens']}"
            return out

        return run

    def summarize(self, cases):
        arms = {}
        for arm in ARMS:
            mine = [c for c in cases if c["ok"] and c["label"] == arm]
            if mine:
                arms[arm] = {
                    "reasoning": _median([c["reasoning_tokens"] for c in mine]),
                    "content_chars": _median([c["detail"]["content_chars"] for c in mine]),
                    "n": len(mine),
                }
        failed = [c for c in cases if not c["ok"]]
        if len(arms) < len(ARMS):
            return {
                "kind": "thinking",
                "arms": arms,
                "passed": False,
                "verdict": "failed",
                "findings": [],
                "headline": f"{len(failed)} of {len(cases)} requests failed",
            }
        name, found = verdict(arms)
        lo, hi = arms["on+low"]["reasoning"], arms["on+high"]["reasoning"]
        return {
            "kind": "thinking",
            "arms": arms,
            "verdict": name,
            "findings": found,
            "passed": name == "ok",
            "headline": f"{name}: off {arms['off']['reasoning']:g} reasoning, effort low {lo:g} / high {hi:g}, "
            f"off + effort {arms['off+effort']['reasoning']:g}",
        }
