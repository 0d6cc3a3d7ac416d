"""`sparkops plan --engine NAME --util U [--window W] [--json]` and
`sparkops plan --host NAME --suggest --min ENGINE=CONCURRENCY … [--window W] [--json]`.

The numbers come from sparkops/planner/engine_model.py and box.py over the KV-pool ledger; `basis` names the
rows each one rests on."""

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError

from dashboard.management.base import CliCommand
from dashboard.models import Engine
from sparkops.planner.box import suggest
from sparkops.planner.engine_model import PlanError
from sparkops.planner.services import box_of, engine_model, host_by_name, host_plan


def _positive_int(text):
    try:
        value = int(str(text).replace(",", ""))
    except ValueError:
        raise CommandError(f"--window takes a whole number of tokens, got {text!r}") from None
    if value <= 0:
        raise CommandError("--window must be a positive number of tokens")
    return value


class Command(CliCommand):
    help = "Predict an engine's KV pool at a memory share and window, or suggest a box's split, from the ledger."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--engine", help="the engine to predict")
        parser.add_argument("--util", type=float, help="--gpu-memory-utilization to predict at, 0–1")
        parser.add_argument("--window", help="--max-model-len (default: the engine's current window)")
        parser.add_argument("--host", help="the box to split (with --suggest)")
        parser.add_argument("--suggest", action="store_true", help="suggest the split that meets the --min targets")
        parser.add_argument(
            "--min",
            action="append",
            default=[],
            metavar="ENGINE=CONCURRENCY",
            help="a minimum concurrency at the window (full-length requests); repeat per engine",
        )
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **o: Any):
        window = _positive_int(o["window"]) if o["window"] is not None else None
        try:
            if o["suggest"] or o["host"]:
                return self._suggest(o, window)
            return self._engine(o, window)
        except PlanError as exc:
            raise CommandError(str(exc)) from None

    def _engine(self, o, window):
        if not o["engine"] or o["util"] is None:
            raise CommandError("pass --engine NAME --util U (or --host NAME --suggest --min ENGINE=C …)")
        engine = Engine.objects.select_related("host").filter(name=o["engine"]).first()
        if engine is None:
            raise CommandError(f"no engine named {o['engine']!r}")
        box = box_of(engine.host)
        model = engine_model(engine, box["memory_gib"])
        p = model.predict(o["util"], window)
        if o["json"]:
            self.stdout.write(json.dumps(p, indent=2))
            return
        self.stdout.write(
            f"{p['engine']} at util {p['util']}, window {p['window']:,}: {p['pool_tokens']:,} tokens "
            f"({p['kv_gib']} GiB KV), {p['concurrency']}× full-length requests"
        )
        spread = p["tokens_per_gib_spread"]
        self.stdout.write(
            f"  tokens per GiB {p['tokens_per_gib']:,}"
            + (f" (±{spread['pct']} % over {spread['rows']} row{'s' if spread['rows'] != 1 else ''})" if spread else "")
            if p["tokens_per_gib"]
            else "  tokens per GiB unknown (rows without KV memory)"
        )
        self.stdout.write(f"  method: {p['method']}")
        if p["naive_concurrency"] is not None:
            corrected = p["corrected_concurrency"]
            self.stdout.write(
                f"  raise {p['base_window']:,} → {p['window']:,}: naive {p['naive_concurrency']}× (pool unchanged); "
                + (
                    f"corrected {corrected}× (workspace {p['workspace_gib']} GiB)"
                    if corrected is not None
                    else f"range {p['concurrency_range'][0]}–{p['concurrency_range'][1]}×"
                )
            )
            self.stdout.write(f"  {p['raise_basis']}")
        self.stdout.write("  basis: " + "; ".join(f"#{r['id']} {r['date']} util {r['util']}" for r in p["basis"]))

    def _suggest(self, o, window):
        if not (o["host"] and o["suggest"] and o["min"]):
            raise CommandError("pass --host NAME --suggest --min ENGINE=CONCURRENCY [--min …]")
        host = host_by_name(o["host"])
        if host is None:
            raise CommandError(f"no host named {o['host']!r}")
        plan = host_plan(host)
        box, models = plan["box"], plan["models"]
        if not box["memory_gib"]:
            raise CommandError(
                f"the memory of {host.name} is unknown: no MemTotal reading from the poller yet, and no memory "
                "set on the planner page"
            )
        mins = {}
        for item in o["min"]:
            name, sep, value = item.partition("=")
            try:
                conc = float(value)
            except ValueError:
                conc = None
            if not sep or conc is None or conc <= 0:
                raise CommandError(f"--min reads ENGINE=CONCURRENCY with a positive number, got {item!r}")
            if name not in models:
                raise CommandError(
                    f"{name!r} is not an engine of {host.name} with KV-pool ledger rows "
                    f"(known: {', '.join(models) or 'none'})"
                )
            mins[name] = conc
        fixed = {n: s for n, s in plan["held"].items() if n not in mins}
        out = suggest(
            models,
            mins=mins,
            window=window,
            memory_gib=box["memory_gib"],
            other_gib=box["other_gib"],
            headroom_gib=box["headroom_gib"],
            fixed=fixed,
            share_limit=box["share_limit"],
        )
        out["host"] = host.name
        # engines the ledger cannot plan by share (llama.cpp): named with what is missing; what
        # they use is in the rest of the box (used now, MemTotal − MemAvailable, less the shares)
        out["not_planned"] = {n: m.missing for n, m in models.items() if m.missing}
        if o["json"]:
            self.stdout.write(json.dumps(out, indent=2))
            return
        for name, s in out["split"].items():
            self.stdout.write(
                f"{name}: util {s['util']:.2f} → {s['concurrency']}× (min {s['min_concurrency']}×), "
                f"{s['pool_tokens']:,} tokens, {s['tokens_per_gib']:,} tokens/GiB"
            )
        for name, share in fixed.items():
            self.stdout.write(f"{name}: util {share} kept (no --min given)")
        for name, missing in out["not_planned"].items():
            self.stdout.write(f"{name}: not planned by share: {missing}")
        b = out["box"]
        self.stdout.write(
            f"box {host.name}: planned {b['used_gib']} of {b['memory_gib']} GiB used, {b['free_gib']} free, "
            f"headroom {b['headroom_gib']} GiB (the rest of the box, {b['other_gib']} GiB: used now, "
            "MemTotal − MemAvailable, less the engines' shares)"
        )
        self.stdout.write(
            f"shares sum to {b['shares_sum']:.2f} of at most {b['share_limit']:.2f} ({box['share_limit_means']})"
        )
        if out["feasible"]:
            self.stdout.write(f"the rest goes to {out['starved']} (fewest tokens per GiB)")
        else:
            self.stdout.write(
                f"infeasible: the targets need {out['short_gib']} GiB (util {out['short_util']}) more than the box has"
            )
