"""Pre-flight refusals and the after-the-fact checks a run must pass to be believed."""

from .spec import depth_tolerance

# llama.cpp reuses the chat template's leading tokens even before a unique salt
# (a capture shows 8 cached of 34); vLLM caches whole blocks, so any hit is a real one.
COLD_TOLERANCE = {"llamacpp": 32}
FOLLOW_UP_MIN_SHARE = 0.9


def preflight(*, spec, window, engine_status=None):
    """Reason to refuse before sending anything, or None."""
    if spec.reps < 1 or spec.reps % 2 == 0:
        return f"repetitions must be odd and at least 1 (got {spec.reps})"
    if spec.output_tokens < 2:
        return "pin at least 2 output tokens (decode rate needs two)"
    if spec.concurrency < 1:
        return "concurrency must be at least 1"
    if spec.depth > 0 and spec.concurrency > 1 and not spec.force:
        return (
            f"depth {spec.depth} with concurrency {spec.concurrency} is refused: deep prompts at concurrency "
            "deadlocked an engine once (use depth 0 or concurrency 1, or set force)"
        )
    if engine_status == "down":
        return "the engine is down"
    if not window:
        return "the engine's window is unknown (no collector reading, and /v1/models does not say): refusing to guess"
    need = spec.depth + spec.output_tokens
    if need > window:
        return (
            f"prompt {spec.depth} + output {spec.output_tokens} = {need} tokens does not fit the window of "
            f"{window} tokens: the engine would answer HTTP 400 (or clamp the output), not a speed"
        )
    return None


def check(name, ok, detail):
    return {"name": name, "ok": ok, "detail": detail}


def cache_checks(*, spec, reps):
    """Cold: cached_tokens must be 0. Follow-up: most of the prompt must come from cache."""
    ok_reps = [r for r in reps if r.ok]
    if not ok_reps:
        return []
    unknown = [r.index for r in ok_reps if r.cached_tokens is None]
    if unknown:
        return [
            check(
                "cache",
                None,
                "the engine does not report cached tokens (vLLM: --enable-prompt-tokens-details); "
                f"cache state unverified for reps {unknown}",
            )
        ]
    if spec.mode == "cold":
        limit = COLD_TOLERANCE.get(spec.engine_kind, 0)
        bad = [(r.index, r.cached_tokens) for r in ok_reps if r.cached_tokens > limit]
        detail = f"cached_tokens ≤ {limit} on every rep" if not bad else f"not cold: (rep, cached) {bad}"
        return [check("cold", not bad, detail)]
    missed = [
        (r.index, r.cached_tokens, r.prompt_tokens)
        for r in ok_reps
        if r.cached_tokens < FOLLOW_UP_MIN_SHARE * (r.prompt_tokens or 0)
    ]
    detail = (
        f"cached ≥ {FOLLOW_UP_MIN_SHARE:.0%} of the prompt on every rep"
        if not missed
        else f"prefix cache missed: (rep, cached, prompt) {missed}"
    )
    return [check("follow_up", not missed, detail)]


def depth_check(*, spec, reps):
    ok_reps = [r for r in reps if r.ok and r.prompt_tokens is not None]
    if not ok_reps or spec.depth == 0:
        return []
    tol = depth_tolerance(spec.depth)
    bad = [(r.index, r.prompt_tokens) for r in ok_reps if abs(r.prompt_tokens - spec.depth) > tol]
    detail = (
        f"usage.prompt_tokens within ±{tol} of {spec.depth}"
        if not bad
        else f"prompt depth off by more than ±{tol}: (rep, prompt_tokens) {bad}"
    )
    return [check("depth", not bad, detail)]
