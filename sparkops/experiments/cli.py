"""`sparkops bench ab`: arguments and handler, called by management/commands/bench.py.

Runs the experiment here and now, slot by slot in the order A, B, A, B … (side by side: two
engines; the same engine for both arms is the restart mode, which needs the page: it waits for
the operator between slots). Exit status 1 when no verdict could be given."""

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from sparkops.benchmarks.cli_args import engine_named, whole
from sparkops.benchmarks.models import Run

from .create import ExperimentError, experiment_create
from .models import MIN_REPS, Experiment
from .runner import experiment_advance


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--a", required=True, metavar="ENGINE", help="arm A (the control)")
    parser.add_argument("--b", required=True, metavar="ENGINE", help="arm B (the variant)")
    parser.add_argument("--flags", default="", help="comma-separated launch flags the arms are meant to differ by")
    parser.add_argument("--name", default="", help="what the experiment decides (default: 'A vs B')")
    parser.add_argument("--output-tokens", type=whole, default=512, help="pinned output tokens (default 512)")
    parser.add_argument("--depth", type=whole, default=1024, help="prompt tokens (default 1024)")
    parser.add_argument(
        "--reps", type=whole, default=MIN_REPS, help=f"repetitions per arm (default and least {MIN_REPS})"
    )
    parser.add_argument("--probe", default="", help="a quality probe run on each arm after its last repetition")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    parser.add_argument("--json", action="store_true")


def handle(command: BaseCommand, **opts: Any) -> None:
    a, b = engine_named(opts["a"], flag="--a"), engine_named(opts["b"], flag="--b")
    if a.pk == b.pk:
        raise CommandError(
            "--a and --b name the same engine: the restart mode (one engine, restarted between arms) "
            "waits for the operator and runs from the experiment page (/experiments/new/)"
        )
    try:
        experiment = experiment_create(
            name=opts["name"] or f"{a.name} vs {b.name}",
            engine_a=a,
            engine_b=b,
            workload={"depth": opts["depth"], "output_tokens": opts["output_tokens"], "timeout_s": opts["timeout"]},
            reps=opts["reps"],
            flags=[f for f in opts["flags"].split(",") if f.strip()],
            probe=opts["probe"],
        )
    except ExperimentError as exc:
        raise CommandError(str(exc)) from None
    experiment = experiment_advance(experiment=experiment, trigger=Run.Trigger.CLI)
    summary = experiment.verdict
    if opts["json"]:
        command.stdout.write(
            json.dumps({"status": experiment.status, "reason": experiment.reason, **summary}, indent=2)
        )
    else:
        _print(command, experiment, summary)
    if experiment.status != Experiment.Status.DONE:
        raise CommandError(f"experiment {experiment.pk} {experiment.status}: {experiment.reason}")


def _n(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _print(command: BaseCommand, experiment: Experiment, s: dict[str, Any]) -> None:
    out = command.stdout.write
    out(f"experiment {experiment.pk} {s['name']}: {experiment.status}  (workload {s['workload_hash']})")
    for arm in "AB":
        r = s["arms"][arm]
        q = r["quality"]
        out(
            f"  arm {arm} {r['engine']:<20} decode {_n(r['per_stream_decode_tokens_per_s'])} tok/s/stream, "
            f"aggregate {_n(r['aggregate_decode_tokens_per_s'])}, TTFT {_n(r['ttft_ms'])} ms, "
            f"{r['reps_counted']}/{r['reps_total']} counted, checks passed {q['passed']}/{q['of']}"
            + (
                f", {q['probe']['kind']} probe {q['probe']['status']}: {q['probe']['headline']}"
                if q.get("probe")
                else ""
            )
        )
    for row in s["slots"]:
        mark = "" if row["valid"] else f"  INVALID: {row['invalid_reason']}"
        out(
            f"  #{row['order']:<3} {row['arm']} run {row['run']} {row['status']:<7} decode {_n(row['decode_tokens_per_s'])}{mark}"
        )
    for d in s["difference"]["lines"]:
        out(f"  differs: {d['name']} {d['a']} → {d['b']}")
    for w in s["difference"]["warnings"]:
        out(f"  WARNING: {w}")
    for f in s["figures"].values():
        out(
            f"  {f['label']:<14} B/A {_n(f['ratio'], 3)}  [{_n(f['ci_low'], 3)}, {_n(f['ci_high'], 3)}]  {f['verdict']}"
        )
    out(f"  {s['method']}")
