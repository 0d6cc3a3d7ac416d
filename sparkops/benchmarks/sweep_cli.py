"""`sparkops bench sweep`: arguments and handler, called by management/commands/bench.py.

    sparkops bench sweep --engine NAME (--concurrency 1,2,4,8 | --depth 0,4096,16384)
        [--output-tokens N] [--reps N] [--force] [--json]

Runs the cells here and now, in order (as `bench run` does), and prints the sweep table of
docs/field-notes.md §12 or, with --json, sweep_export.sweep_summary."""

import json

from django.core.management.base import CommandError

from .cli_args import engine_named
from .models import Run
from .spec import RunSpec
from .sweep import SweepError, parse_values, sweep_create, sweep_execute
from .sweep_export import number, sweep_markdown, sweep_summary


def add_arguments(parser):
    parser.add_argument("--engine", required=True, help="engine name (see `sparkops engine list`)")
    axis = parser.add_mutually_exclusive_group(required=True)
    axis.add_argument("--concurrency", help="the concurrency of each cell, rising, e.g. 1,2,4,8")
    axis.add_argument("--depth", help="the prompt tokens of each cell, rising, e.g. 0,4096,16384")
    parser.add_argument("--at-depth", type=int, default=0, help="prompt tokens of a concurrency sweep (default 0)")
    parser.add_argument("--at-concurrency", type=int, default=1, help="streams of a depth sweep (default 1)")
    parser.add_argument("--output-tokens", type=int, default=512, help="pinned output tokens (default 512)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per cell, odd (default 3)")
    parser.add_argument("--force", action="store_true", help="allow depth > 0 with concurrency > 1")
    parser.add_argument("--follow-up", action="store_true", help="warm prefix cache instead of cold prompts")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default 600)")
    parser.add_argument(
        "--error-threshold", type=float, default=0.2, help="stop when a cell's failed share passes this (0.2)"
    )
    parser.add_argument("--json", action="store_true")


def handle(command, **opts):
    engine = engine_named(opts["engine"])
    if opts["timeout"] <= 0:
        raise CommandError("--timeout must be positive")
    axis = "concurrency" if opts["concurrency"] is not None else "depth"
    try:
        values = parse_values(opts[axis], axis=axis)
        spec = RunSpec(
            engine_name=engine.name,
            engine_kind=engine.kind,
            base_url=engine.base_url,
            depth=opts["at_depth"],
            concurrency=opts["at_concurrency"],
            mode="follow_up" if opts["follow_up"] else "cold",
            output_tokens=opts["output_tokens"],
            reps=opts["reps"],
            force=opts["force"],
            timeout_s=opts["timeout"],
        )
        sweep = sweep_create(
            engine=engine,
            axis=axis,
            values=values,
            spec=spec,
            trigger=Run.Trigger.CLI,
            error_threshold=opts["error_threshold"],
        )
    except SweepError as exc:
        raise CommandError(str(exc)) from None
    progress = None if opts["json"] else (lambda row: command.stdout.write(_cell_line(axis, row)))
    sweep = sweep_execute(sweep=sweep, on_cell=progress)
    if opts["json"]:
        command.stdout.write(json.dumps(sweep_summary(sweep), indent=2))
    else:
        command.stdout.write(f"sweep {sweep.pk} on {engine.name}: {sweep.status}")
        command.stdout.write(sweep_markdown(sweep))
    if sweep.status != Run.Status.DONE:
        raise CommandError(f"sweep {sweep.pk} {sweep.status}: {sweep.reason}")


def _cell_line(axis, row):
    errors = ", ".join(f"{k} ×{v}" for k, v in row["errors"].items())
    return (
        f"  {axis} {row['value']:,}: {row['status']} — aggregate {number(row['aggregate_decode_tokens_per_s'])} tok/s, "
        f"per-stream {number(row['per_stream_decode_tokens_per_s'])}, TTFT {number(row['ttft_ms'])} ms, "
        f"{row['ok']}/{row['requests']} ok{' (' + errors + ')' if errors else ''}"
    )
