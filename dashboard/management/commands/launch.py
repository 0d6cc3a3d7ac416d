"""`sparkops launch [--no-wait] [--force REASON] [--budget S] [--share F] [--name NAME] -- ENGINE ARGV…`:
the guarded launch path (sparkops/controls/launch.py). On success it does not return: the
process becomes the engine."""

import argparse
import math
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError

from dashboard.management.base import CliCommand
from sparkops.controls import launch as guarded
from sparkops.controls.launchplan import Refused


class Command(CliCommand):
    help = (
        "Start an engine through the box's controls: compile caps exported, one cold start at a time, "
        "a memory preflight, the launch recorded; then exec the engine."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--no-wait", action="store_true", help="refuse instead of waiting for another start")
        parser.add_argument(
            "--force", metavar="REASON", help="start past the memory preflight; REASON goes into the change log"
        )
        parser.add_argument(
            "--budget", type=float, default=1200.0, help="seconds the box's start lock waits for it to serve (1200)"
        )
        parser.add_argument(
            "--share", type=float, help="its planned memory share when its flags do not say it (llama-server)"
        )
        parser.add_argument(
            "--name", help="the engine's name (default: the box's engine at its address, else hand-run-PORT)"
        )
        parser.add_argument("engine_argv", nargs=argparse.REMAINDER, help="-- then the engine's command line")

    def handle(self, *args: Any, **o: Any):
        argv = list(o["engine_argv"])
        if argv[:1] == ["--"]:
            argv = argv[1:]
        if not (math.isfinite(o["budget"]) and o["budget"] > 0):
            raise CommandError(f"--budget takes a positive number of seconds (got {o['budget']:g})", returncode=2)
        if o["share"] is not None and not 0 < o["share"] <= 1:
            raise CommandError(f"--share takes a share of the memory, 0 to 1 (got {o['share']:g})", returncode=2)
        if o["force"] is not None and not o["force"].strip():
            raise CommandError("--force takes a reason (it goes into the change log)", returncode=2)

        def say(line) -> None:
            self.stdout.write(line)
            self.stdout.flush()

        try:
            guarded.launch(
                argv,
                no_wait=o["no_wait"],
                force=(o["force"] or "").strip() or None,
                budget_s=o["budget"],
                share=o["share"],
                name=o["name"],
                say=say,
            )
        except Refused as exc:
            raise CommandError(str(exc), returncode=exc.code) from None
