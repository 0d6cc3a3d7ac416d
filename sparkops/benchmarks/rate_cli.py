"""`sparkops bench rate`: requests at a fixed or Poisson arrival rate for a duration, with goodput.

sparkops bench rate --engine NAME --rate 4 --duration 60 [--poisson] [--seed N]
    [--slo-ttft-ms 2000] [--slo-tpot-ms 100] [--depth N --force] [--output-tokens N] [--json]"""

import json

from django.core.management.base import CommandError

from .cli_args import engine_named
from .models import Run
from .rate import RateError, rate_create, rate_execute
from .services import run_summary
from .spec import RunSpec
from .sweep_export import number


def add_arguments(parser):
    parser.add_argument("--engine", required=True, help="engine name (see `sparkops engine list`)")
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals (default 60)")
    parser.add_argument("--poisson", action="store_true", help="Poisson arrivals (default: evenly spaced)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the Poisson arrivals (default 0)")
    parser.add_argument("--slo-ttft-ms", type=float, default=2000.0, help="TTFT SLO, ms (default 2000)")
    parser.add_argument("--slo-tpot-ms", type=float, default=100.0, help="time per output token SLO, ms (100)")
    parser.add_argument("--depth", type=int, default=0, help="prompt tokens (default 0; above 0 needs --force)")
    parser.add_argument("--output-tokens", type=int, default=256, help="pinned output tokens (default 256)")
    parser.add_argument("--force", action="store_true", help="allow depth > 0 (requests overlap)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default 600)")
    parser.add_argument("--json", action="store_true")


def handle(command, **opts):
    engine = engine_named(opts["engine"])
    if opts["timeout"] <= 0:
        raise CommandError("--timeout must be positive")
    spec = RunSpec(
        engine_name=engine.name,
        engine_kind=engine.kind,
        base_url=engine.base_url,
        depth=opts["depth"],
        output_tokens=opts["output_tokens"],
        force=opts["force"],
        timeout_s=opts["timeout"],
    )
    try:
        run = rate_create(
            engine=engine,
            spec=spec,
            rate=opts["rate"],
            duration_s=opts["duration"],
            arrival="poisson" if opts["poisson"] else "fixed",
            slo_ttft_ms=opts["slo_ttft_ms"],
            slo_tpot_ms=opts["slo_tpot_ms"],
            seed=opts["seed"],
        )
    except RateError as exc:
        raise CommandError(str(exc)) from None
    run = rate_execute(run=run)
    summary = {**run_summary(run), "rate": (run.stats or {}).get("rate")}
    if opts["json"]:
        command.stdout.write(json.dumps(summary, indent=2))
    else:
        _print(command, run, summary)
    if run.status != Run.Status.DONE:
        raise CommandError(f"run {run.pk} {run.status}: {run.reason}")


def _print(command, run, s):
    r = s["rate"] or {}
    command.stdout.write(f"rate run {run.pk} on {s['engine']}: {s['status']}")
    if not r:
        return
    command.stdout.write(
        f"  {r['arrival']} {r['rate_rps']:g} req/s for {r['duration_s']:g} s: {r['sent']} sent, {r['ok']} ok"
    )
    command.stdout.write(
        f"  goodput {100 * (r['goodput_share'] or 0):.1f} % ({r['met_slo']} met TTFT ≤ {r['slo_ttft_ms']:g} ms "
        f"and TPOT ≤ {r['slo_tpot_ms']:g} ms), {r['goodput_rps']:.2f} req/s"
    )
    command.stdout.write(f"  TTFT median {_ms(r['ttft_ms'])}, time per output token median {_ms(r['tpot_ms'], 2)}")
    errors = ", ".join(f"{k} ×{v}" for k, v in s["errors"].items()) or "none"
    command.stdout.write(f"  errors: {errors}")


def _ms(value, digits=1):
    return "—" if value is None else f"{number(value, digits)} ms"
