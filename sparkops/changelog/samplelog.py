"""A generated change log of the size docs/field-notes.md §15 gives, for the scale test and
bench/changelog_scale.py: about 600 entries and 150 corrections over four months, written as a
person keeps one — flag changes, claims with predictions, measurements, incident notes,
decisions, code fences holding '## ' and '> Correction' lines, evidence, corrections against a
claim (withdrawn, superseded, or plain) and against a whole entry. Deterministic per seed."""

import random
from datetime import datetime, timedelta

ENGINES = ("nemotron", "q38", "util-4b", "vision-sidecar", "driver-80b")
FLAGS = (
    ("--max-model-len", ("65536", "131072", "262144")),
    ("--gpu-memory-utilization", ("0.30", "0.35", "0.40", "0.45")),
    ("--max-num-seqs", ("64", "128", "256")),
    ("--max-num-batched-tokens", ("2048", "8192", "16384")),
    ("--enable-prefix-caching", ("off", "on")),
    ("--kv-cache-dtype", ("auto", "fp8")),
    ("MAX_JOBS", ("4", "8", "16")),
    ("Restart", ("on-failure", "always")),
)
METRICS = (
    ("concurrency", (3.2, 21.5)),
    ("pool_tokens", (1_200_000, 2_900_000)),
    ("kv_memory_gib", (6.5, 14.0)),
    ("tokens_per_gib", (180_000, 330_000)),
)
TOPICS = (
    "prefix-cache hit rate",
    "decode step time",
    "compile storm",
    "stuck low clock",
    "PSI memory pressure",
    "swap use",
    "KV pool",
    "chat template",
    "tool calls",
    "spec decode acceptance",
    "TTFT at depth",
)
WORDS = (
    "the",
    "engine",
    "agents",
    "window",
    "pool",
    "restart",
    "after",
    "before",
    "measured",
    "cold",
    "warm",
    "cache",
    "tokens",
    "batch",
    "clock",
    "power",
    "driver",
    "unit",
    "journal",
    "fleet",
    "latency",
    "budget",
)


def _sentence(rng, n=12):
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def _when(t):
    return f"{t:%Y-%m-%d}" if (t.hour, t.minute) == (0, 0) else f"{t:%Y-%m-%d %H:%M}"


def generate(entries=600, corrections=150, seed=14, start=datetime(2026, 4, 1, 8, 0)):
    """The log as Markdown text (site time zone, as the import reads it)."""
    rng = random.Random(seed)
    span_min = 122 * 24 * 60  # four months
    times = sorted(start + timedelta(minutes=rng.randrange(span_min)) for _ in range(entries))
    corrected = set(rng.sample(range(entries), corrections))
    out = ["# Spark config log (generated)\n", "Kept by hand since April; older engines included.\n"]
    seps = (" · ", " · ", " · ", " — ", " - ", ": ")
    for i, stamp in enumerate(times):
        t = stamp.replace(second=0, microsecond=0)
        kind = rng.choices(("flag_change", "claim", "measurement", "incident_note", "decision"), (5, 4, 2, 2, 2))[0]
        engines = sorted(rng.sample(ENGINES, rng.choice((1, 1, 2))))
        topic = rng.choice(TOPICS)
        lines = [
            f"## {_when(t)}{rng.choice(seps)}{topic.capitalize()} on {', '.join(engines)} (#{i + 1})",
            f"Engines: {', '.join(engines)}",
            f"Kind: {kind.replace('_', ' ') if i % 7 == 0 else kind}",
        ]
        if kind == "flag_change" or rng.random() < 0.2:
            for flag, values in rng.sample(FLAGS, rng.choice((1, 1, 2))):
                old, new = rng.sample(values, 2)
                lines.append(f"Flag: {flag}: {old} → {new}")
        if rng.random() < 0.5:
            lines.append(f"Reason: {_sentence(rng, 8)}")
        claims = 0
        if kind in ("claim", "measurement") or rng.random() < 0.15:
            for _ in range(rng.choice((1, 1, 2, 3))):
                claims += 1
                lines.append(f"Claim: {topic} {_sentence(rng, 9).lower()}")
                if rng.random() < 0.6:
                    metric, (lo, hi) = rng.choice(METRICS)
                    value = (
                        round(rng.uniform(lo, hi), 1) if metric != "pool_tokens" else rng.randrange(int(lo), int(hi))
                    )
                    window = rng.choice(("", " at 131072", " at 262144"))
                    lines.append(f"Prediction: {metric} {value}{window} on {engines[0]}")
        if rng.random() < 0.3:
            lines.append(f"Evidence: https://example.test/runs/{i + 1}")
        lines += ["", _sentence(rng, 20), ""]
        if rng.random() < 0.15:  # a unit file or a shell session pasted into the body
            fence = rng.choice(("```", "~~~"))
            lines += [
                f"{fence}ini",
                "## the unit as it ran",
                "> Correction: not one, a quoted line",
                f"ExecStart=/usr/bin/vllm serve --max-model-len {rng.choice(FLAGS[0][1])}",
                fence,
                "",
            ]
        if rng.random() < 0.4:
            lines += [_sentence(rng, 30), ""]
        if i in corrected:
            when = t + timedelta(days=rng.randrange(1, 20), hours=rng.randrange(0, 10))
            if claims and rng.random() < 0.7:
                mark = rng.choice(("", "", ", withdrawn", ", superseded"))
                opts = f" (claim {rng.randrange(1, claims + 1)}{mark})"
            else:
                opts = ""
            lines.append(f"> Correction {_when(when)}{opts}: {_sentence(rng, 14)}")
            if rng.random() < 0.5:
                lines += [f"> {_sentence(rng, 16)}", ">", f"> {_sentence(rng, 10)}"]
            if rng.random() < 0.4:
                lines.append(f"> Evidence: run:{rng.randrange(1, 400)}")
            lines.append("")
        out.append("\n".join(lines).rstrip("\n") + "\n")
    return "\n".join(out)
