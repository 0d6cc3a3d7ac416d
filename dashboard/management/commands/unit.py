"""`sparkops unit fix ENGINE [--check KEY]... [--apply] [--json] [-v]`"""

import json
import logging
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from dashboard.management.base import CliCommand
from dashboard.models import Engine
from sparkops.audit.checks import CHECKS
from sparkops.controls import unitfix
from sparkops.launch.observer import observe_now


class Command(CliCommand):
    help = (
        "Fix an engine's unit: the drop-in each failing launch-audit check needs (shown as a diff; "
        "--apply writes them, reloads systemd and logs the change)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="fix")
        fix = sub.add_parser("fix", help=self.help)
        fix.add_argument("engine", metavar="ENGINE")
        fix.add_argument(
            "--check",
            action="append",
            default=[],
            metavar="KEY",
            help=f"only this audit check (repeatable): {', '.join(CHECKS)}",
        )
        fix.add_argument("--apply", action="store_true", help="write the drop-ins, daemon-reload, observe the unit")
        fix.add_argument("--json", action="store_true")
        fix.add_argument("-v", "--verbose", action="store_true", help="the log's INFO lines on stderr too")

    def handle(self, *args: Any, verbose=False, **opts: Any):
        """Quiet unless -v: what it found and wrote is on stdout; the log's INFO lines (the observation
        of each peer unit, the reload) are the worker's business, noise on an operator's terminal."""
        if verbose or opts.get("verbosity", 1) >= 2:
            return self.fix(**opts)
        logging.disable(logging.INFO)
        try:
            return self.fix(**opts)
        finally:
            logging.disable(logging.NOTSET)

    def fix(self, *, engine=None, check=(), apply=False, **opts: Any):
        found = Engine.objects.select_related("host").filter(name=engine).first()
        if found is None:
            raise CommandError(f"no engine named {engine!r}; `sparkops engine list` shows them")
        on_box = found.host_id is None or found.host.name == settings.SPARKOPS_HOST_NAME
        if apply and not on_box:
            return self._refuse(
                found,
                f"{found.name}'s unit is on {found.host.name}, not on this box ({settings.SPARKOPS_HOST_NAME}): "
                "run `sparkops unit fix` there, or apply it from the audit page (the box's worker writes it)",
                opts.get("json"),
            )
        if on_box and found.unit:
            for peer in Engine.objects.filter(host_id=found.host_id, retired_at__isnull=True).exclude(unit=""):
                observe_now(peer)  # the audit and the peers' units as they are now
        the_plan = unitfix.plan(found, checks=check, live=on_box)
        if apply:
            the_plan = unitfix.apply(found, the_plan)
        if opts.get("json"):
            self.stdout.write(json.dumps(the_plan.as_dict(), indent=2))
        else:
            self._print(the_plan, apply)
        if the_plan.refused:
            raise SystemExit(1)

    def _refuse(self, engine, why, as_json):
        if as_json:
            out = unitfix.Plan(engine=engine.name, unit=engine.unit or "", scope=engine.unit_scope, refused=why)
            self.stdout.write(json.dumps(out.as_dict(), indent=2))
            raise SystemExit(1)
        raise CommandError(why)

    def _print(self, p, apply) -> None:
        if p.refused:
            self.stderr.write(f"refused: {p.refused}")
            return
        for fix in p.fixes:
            self.stdout.write(fix.diff.rstrip("\n") + "\n")  # the note is in the file's header
        for skip in p.skipped:
            self.stdout.write(f"no fix for {skip['check']} ({skip['status']}): {skip['why']}")
        if not p.fixes:
            self.stdout.write(f"{p.engine}: nothing to write in {p.dropin_dir}")
        elif not apply:
            self.stdout.write(f"{len(p.fixes)} drop-in(s) for {p.unit}; run again with --apply to write them")
        else:
            self.stdout.write(f"written in {p.dropin_dir}; daemon-reload: {p.daemon_reload}")
            if p.entry:
                self.stdout.write(f"change log: entry {p.entry['id']}: {p.entry['title']}")
