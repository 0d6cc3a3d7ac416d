"""`sparkops audit [--engine NAME] [--host NAME] [--json] [--set CHECK.THRESHOLD=VALUE]... [--no-observe]`
`sparkops audit [--host NAME] --save CHECK.THRESHOLD=VALUE... | --reset CHECK.THRESHOLD... | --thresholds`"""

import json
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from dashboard.management.base import CliCommand
from dashboard.models import Engine, Host
from sparkops.audit.checks import CHECKS
from sparkops.audit.run import audit
from sparkops.audit.thresholds import parse_overrides, stored_overrides, thresholds, thresholds_save
from sparkops.launch.observer import Observer


class Command(CliCommand):
    help = (
        "Audit how the box's engines are launched against the playbook; exit 1 when any check fails "
        "(so a box's config repository can run it in CI)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--engine", default=None, help="only this engine's checks")
        parser.add_argument("--host", default=None, help="the box (default: this one, or the engine's)")
        parser.add_argument("--json", action="store_true")
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="CHECK.THRESHOLD=VALUE",
            help="a threshold for this run, e.g. compile_caps.max_jobs=8 (repeatable)",
        )
        parser.add_argument(
            "--save",
            action="append",
            default=[],
            metavar="CHECK.THRESHOLD=VALUE",
            help="store a threshold for the box (the audit page, the card badge and later runs use it); repeatable",
        )
        parser.add_argument(
            "--reset",
            action="append",
            default=[],
            metavar="CHECK.THRESHOLD",
            help="forget the box's stored threshold: the check's default applies again; repeatable",
        )
        parser.add_argument(
            "--thresholds", action="store_true", help="list every threshold: default, stored, in force; then stop"
        )
        parser.add_argument(
            "--no-observe",
            action="store_true",
            help="audit the stored snapshots; by default this box's units are read first",
        )

    def handle(self, *args: Any, engine=None, host=None, set=(), no_observe=False, save=(), reset=(), **opts: Any):
        try:
            overrides = parse_overrides(set)
            stored = parse_overrides(save)
            forget = parse_overrides(f"{name}={self._default(name)}" for name in reset)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        only = None
        if engine:
            only = Engine.objects.select_related("host").filter(name=engine).first()
            if only is None:
                raise CommandError(f"no engine named {engine!r}; `sparkops engine list` shows them")
        box = only.host if only else Host.objects.filter(name=host or settings.SPARKOPS_HOST_NAME).first()
        if box is None:
            raise CommandError(f"no host named {host or settings.SPARKOPS_HOST_NAME!r}")
        if stored or forget or opts.get("thresholds"):
            return self._thresholds(box, {**_flat(forget), **_flat(stored)}, as_json=opts.get("json"))
        engines = list(Engine.objects.select_related("host").filter(host=box, retired_at__isnull=True).order_by("name"))
        if not no_observe and box.name == settings.SPARKOPS_HOST_NAME:
            Observer().observe(engines)
        results = audit(engines, overrides=overrides, only_engine=only)
        failed = any(r.status == "fail" for r in results)
        if opts.get("json"):
            self.stdout.write(
                json.dumps({"host": box.name, "failed": failed, "results": [r.as_dict() for r in results]}, indent=2)
            )
        else:
            if not results:
                self.stdout.write(f"{box.name}: no launch configuration observed yet (is the worker running?)")
            for r in results:
                self.stdout.write(f"{r.status.upper():4}  {r.subject:24} {r.title}: {r.evidence}")
                if r.fix:
                    self.stdout.write(f"      fix: {r.fix}")
        if failed:
            raise SystemExit(1)

    @staticmethod
    def _default(name):
        key, _, field = name.partition(".")
        check = CHECKS.get(key)
        if check is None or field not in check.DEFAULTS:
            return ""  # parse_overrides names the thresholds there are
        return check.DEFAULTS[field]

    def _thresholds(self, box, values, *, as_json=False) -> None:
        changed = thresholds_save(host=box, values=values) if values else []
        stored = stored_overrides(box.pk)
        rows = [
            {
                "threshold": f"{key}.{field}",
                "default": default,
                "stored": stored.get(key, {}).get(field),
                "in_force": stored.get(key, {}).get(field, default),
                "bounds": list(bounds) if bounds else None,
            }
            for key, field, default, bounds in thresholds()
        ]
        if as_json:
            self.stdout.write(json.dumps({"host": box.name, "changed": changed, "thresholds": rows}, indent=2))
            return
        for name in changed:
            self.stdout.write(f"{box.name}: {name} saved")
        for r in rows:
            mark = f"stored {r['stored']}" if r["stored"] is not None else "default"
            self.stdout.write(f"{r['threshold']:45} {r['in_force']!s:22} ({mark}; default {r['default']})")


def _flat(overrides):
    return {(key, field): value for key, fields in overrides.items() for field, value in fields.items()}
