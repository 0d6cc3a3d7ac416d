import argparse
import json

from django.core.management.base import CommandError

from dashboard.benchmarks.cli_args import engine_named, whole
from dashboard.management.base import CliCommand
from dashboard.measured.services import profile_cron
from dashboard.probes.models import ProbeProfile, ProbeRun
from dashboard.probes.services import probe_run_create, probe_run_execute, probe_summary
from dashboard.probes.spec import KINDS, ProbeSpec, parse_depths


def _depths(value):
    try:
        return parse_depths(value)
    except ValueError as exc:  # argparse shows an ArgumentTypeError's own words
        raise argparse.ArgumentTypeError(str(exc)) from None


class Command(CliCommand):
    help = "Run a quality probe against an engine now, or list probe profiles and their latest runs."

    def add_arguments(self, parser):
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

    def handle(self, *args, action, **opts):
        getattr(self, f"do_{action}")(**opts)

    def _spec(self, opts):
        if opts["profile"]:
            profile = ProbeProfile.objects.select_related("engine").filter(name=opts["profile"]).first()
            if profile is None:
                raise CommandError(f"no probe profile named {opts['profile']!r} (see `sparkops probe list`)")
            return profile.engine, profile.spec(), profile
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

    def do_run(self, **opts):
        engine, spec, profile = self._spec(opts)
        run = probe_run_create(engine=engine, spec=spec, profile=profile, trigger=ProbeRun.Trigger.CLI)
        run = probe_run_execute(run=run)
        summary = probe_summary(run)
        if opts["json"]:
            self.stdout.write(json.dumps(summary, indent=2))
        else:
            self._print(summary)
        if run.status != ProbeRun.Status.DONE:
            raise CommandError(f"probe run {run.pk} {run.status}: {run.reason}")

    def _print(self, s):
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

    def do_list(self, *, json: bool, **_):
        rows = []
        for p in ProbeProfile.objects.select_related("engine", "schedule__crontab"):
            last = p.last_run()
            rows.append(
                {
                    "profile": p.name,
                    "engine": p.engine.name,
                    "kind": p.kind,
                    "tokens": p.tokens,
                    "depths": p.depths,
                    "decoys": p.decoys,
                    "reps": p.reps,
                    "hash": p.params_hash,
                    "schedule": profile_cron(p),
                    "last_run": None if last is None else last.list_row(passed=last.passed, headline=last.headline),
                }
            )
        if json:
            self.stdout.write(_dumps(rows))
            return
        if not rows:
            self.stdout.write("no probe profiles")
        for r in rows:
            last = r["last_run"]
            tail = "never run" if last is None else f"run {last['id']} {last['status']}: {last['headline']}"
            self.stdout.write(
                f"{r['profile']:<24} {r['engine']:<16} {r['kind']:<9} {r['schedule'] or 'manual':<14} {tail}"
            )


def _dumps(data):
    return json.dumps(data, indent=2)
