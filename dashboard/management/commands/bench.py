from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError

from sparkops.benchmarks import rate_cli, sweep_cli
from sparkops.benchmarks.bounds import spec_problems
from sparkops.benchmarks.cli_args import engine_named, whole
from sparkops.benchmarks.kind import BENCH
from sparkops.benchmarks.spec import RunSpec
from sparkops.experiments import cli as experiment_cli
from sparkops.measured.cli import KindCommand, profiles_list, run_now

FIGURES = (
    "ttft_ms",
    "first_answer_ms",
    "decode_tokens_per_s",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "chunks",
)


class Command(KindCommand):
    KIND = BENCH
    help = "Run a benchmark against an engine now, or list profiles and recent runs."

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        run = sub.add_parser("run", help="benchmark an engine now (streams, prints the result)")
        target = run.add_mutually_exclusive_group(required=True)
        target.add_argument("--engine", help="engine name (ad-hoc parameters below)")
        target.add_argument("--profile", help="run a saved profile instead")
        run.add_argument("--depth", type=whole, default=1024, help="prompt tokens (default 1024)")
        run.add_argument("--output-tokens", type=whole, default=512, help="pinned output tokens (default 512)")
        run.add_argument("--reps", type=whole, default=3, help="repetitions, odd (default 3)")
        run.add_argument("--concurrency", type=whole, default=1)
        run.add_argument("--force", action="store_true", help="allow depth > 0 with concurrency > 1")
        run.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
        mode = run.add_mutually_exclusive_group()
        mode.add_argument("--cold", dest="mode", action="store_const", const="cold")
        mode.add_argument("--follow-up", dest="mode", action="store_const", const="follow_up")
        run.add_argument("--json", action="store_true")
        lst = sub.add_parser("list", help="profiles and their latest runs")
        lst.add_argument("--json", action="store_true")
        # `bench sweep` and `bench ab` live in their own modules: each adds its arguments and handles them.
        sweep_cli.add_arguments(sub.add_parser("sweep", help="one axis (concurrency or depth) cell by cell"))
        experiment_cli.add_arguments(sub.add_parser("ab", help="an A/B experiment: two arms, alternated"))
        rate_cli.add_arguments(sub.add_parser("rate", help="requests at a fixed or Poisson rate, with goodput"))

    def do_sweep(self, **opts: Any) -> None:
        sweep_cli.handle(self, **opts)

    def do_ab(self, **opts: Any) -> None:
        experiment_cli.handle(self, **opts)

    def do_rate(self, **opts: Any) -> None:
        rate_cli.handle(self, **opts)

    def _spec(self, opts):
        if opts["profile"]:
            return self.saved(opts["profile"])
        engine = engine_named(opts["engine"])
        spec = RunSpec(
            engine_name=engine.name,
            engine_kind=engine.kind,
            base_url=engine.base_url,
            depth=opts["depth"],
            mode=opts["mode"] or "cold",
            output_tokens=opts["output_tokens"],
            reps=opts["reps"],
            concurrency=opts["concurrency"],
            force=opts["force"],
            timeout_s=opts["timeout"],
        )
        return engine, spec, None

    def do_run(self, **opts: Any):
        engine, spec, profile = self._spec(opts)
        problems = [] if profile else spec_problems(spec)
        if problems:
            raise CommandError("; ".join(problems))
        run_now(self.stdout, BENCH, engine=engine, spec=spec, profile=profile, as_json=opts["json"], text=self._print)

    def _print(self, s) -> None:
        self.stdout.write(
            f"run {s['run']} on {s['engine']}: {s['status']}  (hash {s['params_hash']}, reps {s['reps']})"
        )
        for name in FIGURES:
            f = s[name]
            if f.get("n"):
                self.stdout.write(
                    f"  {name:<22} median {f['median']:>10.2f}  min {f['min']:>10.2f}  "
                    f"max {f['max']:>10.2f}  n={f['n']}"
                )
        errors = ", ".join(f"{k} ×{v}" for k, v in s["errors"].items()) or "none"
        self.stdout.write(f"  errors: {errors}")
        for c in s["checks"]:
            mark = {True: "ok", False: "FAILED", None: "unverified"}[c["ok"]]
            self.stdout.write(f"  check {c['name']}: {mark} — {c['detail']}")
        if s["tainted"]:
            self.stdout.write("  TAINTED: " + "; ".join(s["taint_reasons"]))

    def do_list(self, *, json: bool, **_: Any) -> None:
        profiles_list(
            self.stdout,
            BENCH,
            as_json=json,
            row=lambda p: {
                "profile": p.name,
                "engine": p.engine.name,
                "workload": p.workload,
                "depth": p.depth,
                "mode": p.mode,
                "output_tokens": p.output_tokens,
                "reps": p.reps,
                "hash": p.params_hash,
            },
            figures=lambda last: {"decode_median": last.decode_median},
            line=_line,
            empty="no benchmark profiles",
        )


def _line(r: dict[str, Any]) -> str:
    """One profile of `bench list`, as text."""
    last = r["last_run"]
    tail = "never run" if last is None else f"run {last['id']} {last['status']} decode {_rate(last['decode_median'])}"
    return (
        f"{r['profile']:<24} {r['engine']:<16} {r['mode']:<9} depth {r['depth']:<7} out {r['output_tokens']:<6} {tail}"
    )


def _rate(value: float | None) -> str:
    """A decode rate as the pages show it (one decimal, tok/s); the JSON keeps the full figure."""
    return "—" if value is None else f"{value:,.1f} tok/s"
