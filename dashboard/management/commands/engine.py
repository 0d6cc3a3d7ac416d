import json
from argparse import ArgumentParser
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from dashboard.clock import db_now
from dashboard.engine_lifecycle import engine_add, engine_as_dict, engine_retire, reading_stale_after_s
from dashboard.management.base import CliCommand
from dashboard.models import Engine


class Command(CliCommand):
    help = "Add, list or remove the engines SparkOps watches."

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="watch an engine (a retired one: watch it again)")
        add.add_argument("name")
        add.add_argument("--kind", required=True, choices=[k for k, _ in Engine.Kind.choices])
        add.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8000")
        add.add_argument("--unit", default="", help="systemd unit that runs it")
        add.add_argument("--user-unit", action="store_true", help="the unit is a --user unit")
        add.add_argument("--host", default=None, help="host (box) the engine runs on; default: this box")
        add.add_argument("--interval", type=float, default=None, help="poll interval in seconds")
        lst = sub.add_parser("list", help="list engines")
        lst.add_argument("--json", action="store_true")
        rm = sub.add_parser("remove", help="retire an engine: stop watching it; its history stays")
        rm.add_argument("name")

    def handle(self, *args: Any, action, **opts: Any):
        try:
            getattr(self, f"do_{action}")(**opts)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None

    def do_add(self, *, name, kind, url, unit, user_unit, host, interval, **_: Any) -> None:
        engine, reactivated = engine_add(
            name=name,
            kind=kind,
            url=url,
            unit=unit,
            host=host,
            unit_scope="user" if user_unit else "system",
            poll_interval_s=interval,
        )
        verb = "watching retired engine" if reactivated else "added engine"
        self.stdout.write(f"{verb} {engine.name} ({engine.kind}) at {engine.url} on host {engine.host.name}")

    def do_list(self, *, json: bool, **_: Any) -> None:
        now = db_now()  # last_poll_at is stamped with the database's clock
        engines = [_as_dict(e, now) for e in Engine.objects.select_related("host")]
        if json:
            self.stdout.write(_json_dump(engines))
            return
        if not engines:
            self.stdout.write("no engines (add one: sparkops engine add NAME --kind KIND --url URL)")
            return
        self.stdout.write(f"{'NAME':<20} {'KIND':<9} {'STATUS':<12} {'READING':<16} {'URL':<32} {'UNIT':<24} HOST")
        for e in engines:
            status = f"stale ({e['status']})" if e["stale"] else e["status"]
            self.stdout.write(
                f"{e['name']:<20} {e['kind']:<9} {status:<12} {_age_text(e['reading_age_s']):<16} "
                f"{e['url']:<32} {e['unit'] or '-':<24} {e['host']}"
            )

    def do_remove(self, *, name, **_: Any) -> None:
        engine_retire(name=name)
        self.stdout.write(
            f"retired engine {name}: no longer polled nor shown live; its history stays "
            f"('sparkops engine add {name} …' watches it again)"
        )


def _as_dict(engine, now):
    row = engine_as_dict(engine)
    row["retired_at"] = engine.retired_at.isoformat() if engine.retired_at else None
    age = (now - engine.last_poll_at).total_seconds() if engine.last_poll_at else None
    row["reading_age_s"] = None if age is None else round(max(age, 0.0), 1)
    row["stale"] = engine.retired_at is None and age is not None and age > reading_stale_after_s(engine)
    if engine.retired_at is not None:
        row["status"] = "retired"
    return row


def _age_text(age_s) -> str:
    if age_s is None:
        return "never read"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if age_s >= size:
            return f"{int(age_s // size)} {unit} ago"
    return f"{int(age_s)} s ago"


def _json_dump(data):
    return json.dumps(data, indent=2)
