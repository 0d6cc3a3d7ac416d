import argparse
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError

from sparkops.benchmarks.cli_args import engine_named, whole
from sparkops.measured.cli import KindCommand, profiles_list, run_now
from sparkops.measured.services import profile_cron
from sparkops.probes.kind import PROBE
from sparkops.probes.spec import KINDS, ProbeSpec, parse_depths


def _depths(value):
    try:
        return parse_depths(value)
    except ValueError as exc:  # argparse shows an ArgumentTypeError's own words
        raise argparse.ArgumentTypeError(str(exc)) from None


class Command(KindCommand):
    KIND = PROBE
    PROFILE_NOUN = "probe profile"
    help = "Run a quality probe against an engine now, or list probe profiles and their latest runs."

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        run = sub.add_parser("run", help="probe an engine now (prints the scored result)")
        target = run.add_mutually_exclusive_group(required=True)
        target.add_argument("--engine", help="engine name (ad-hoc parameters below)")
        target.add_argument("--profile", help="run a saved probe profile instead")
        run.add_argument("--kind", choices=KINDS, help="needle | soak | tool | thinking | contract")
        run.add_argument("--tokens", type=whole, default=0, help="needle: haystack tokens; soak: tokens to generate")
        run.add_argument("--depths", type=_depths, default=[10, 50, 90], help="needle: depths in percent (10,50,90)")
        run.add_argument("--decoys", type=whole, default=2, help="needle: decoys sharing the anchor phrase (2)")
        run.add_argument("--corpus", default="lighthouse", help="needle: shipped corpus name or a text file")
        run.add_argument("--control", action="store_true", help="needle: also run the control corpus")
        run.add_argument("--reps", type=whole, default=3, help="repetitions per case, odd, >= 3 (3)")
        run.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
        run.add_argument("--json", action="store_true")
        lst = sub.add_parser("list", help="probe profiles and their latest runs")
        lst.add_argument("--json", action="store_true")

    def _spec(self, opts):
        if opts["profile"]:
            return self.saved(opts["profile"])
        if not opts["kind"]:
            raise CommandError("--kind is required with --engine (needle, soak, tool, thinking or contract)")
        engine = engine_named(opts["engine"])
        spec = ProbeSpec(
            engine_name=engine.name,
            engine_kind=engine.kind,
            base_url=engine.base_url,
            kind=opts["kind"],
            tokens=opts["tokens"],
            depths=opts["depths"],
            decoys=opts["decoys"],
            corpus=opts["corpus"],
            control=opts["control"],
            reps=opts["reps"],
            timeout_s=opts["timeout"],
        )
        problems = spec.problems()
        if problems:
            raise CommandError("; ".join(problems))
        return engine, spec, None

    def do_run(self, **opts: Any):
        engine, spec, profile = self._spec(opts)
        run_now(self.stdout, PROBE, engine=engine, spec=spec, profile=profile, as_json=opts["json"], text=self._print)

    def _print(self, s) -> None:
        mark = {True: "good", False: "NOT GOOD", None: "not scored"}[s["passed"]]
        self.stdout.write(
            f"probe run {s['run']} {s['kind']} on {s['engine']}: {s['status']}, {mark} (hash {s['params_hash']})"
        )
        if s["headline"]:
            self.stdout.write(f"  {s['headline']}")
        result = s["result"]
        for row in result.get("rows", []):
            cells = "  ".join(f"{d}%: {c['text']}" for d, c in row["cells"].items())
            label = f"{row['corpus']}{' (control)' if row['control'] else ''}"
            self.stdout.write(f"  {label:<22} {row['tokens']:>8,} tokens  {cells}  {row['seconds_per_case']} s/case")
        for name, case in (result.get("cases") or {}).items():
            self.stdout.write(
                f"  {name:<18} {case['behaviour']}: {case.get('message') or case.get('finish_reason') or ''}"
            )
        errors = ", ".join(f"{k} ×{v}" for k, v in (result.get("errors") or {}).items())
        if errors and s["kind"] != "contract":  # a contract's 400 is its reading, printed above
            self.stdout.write(f"  failed requests: {errors}")
        if s["tainted"]:
            self.stdout.write("  TAINTED: " + "; ".join(s["taint_reasons"]))

    def do_list(self, *, json: bool, **_: Any) -> None:
        profiles_list(
            self.stdout,
            PROBE,
            as_json=json,
            row=lambda p: {
                "profile": p.name,
                "engine": p.engine.name,
                "kind": p.kind,
                "tokens": p.tokens,
                "depths": p.depths,
                "decoys": p.decoys,
                "reps": p.reps,
                "hash": p.params_hash,
                "schedule": profile_cron(p),
            },
            figures=lambda last: {"passed": last.passed, "headline": last.headline},
            line=_line,
            empty="no probe profiles",
        )


def _line(r: dict[str, Any]) -> str:
    """One profile of `probe list`, as text."""
    last = r["last_run"]
    tail = "never run" if last is None else f"run {last['id']} {last['status']}: {last['headline']}"
    return f"{r['profile']:<24} {r['engine']:<16} {r['kind']:<9} {r['schedule'] or 'manual':<14} {tail}"
