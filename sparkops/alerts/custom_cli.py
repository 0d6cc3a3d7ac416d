"""`sparkops alerts custom add|list|remove|export|import`: the operator's own rules from a shell
(alerts/custom_services.py does the work; a refused definition says which field and why)."""

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from .custom_model import CustomRule
from .custom_services import (
    custom_rule_create,
    custom_rule_enable,
    custom_rule_reasons,
    custom_rule_remove,
    custom_rules_export,
    custom_rules_import,
)

COMPARATORS = {"above": ">", "at_or_above": ">=", "below": "<", "at_or_below": "<="}


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """The `custom` subcommand of `sparkops alerts`."""
    custom = sub.add_parser("custom", help="rules of your own: a threshold on any stored series")
    actions = custom.add_subparsers(dest="custom_action", required=True)
    add = actions.add_parser(
        "add", help="add a rule, e.g. add kv-high --engine vllm-main --metric kv_cache_usage --above 0.95 --for 5m"
    )
    add.add_argument("name", help="the rule's name; its key is custom.NAME")
    where = add.add_mutually_exclusive_group()
    where.add_argument("--engine", default="", help="one engine (default: every engine)")
    where.add_argument("--host", default=None, help="a host metric: one host, or '' for every host")
    add.add_argument("--metric", required=True, help="a stored series, e.g. kv_cache_usage or gpu0.temperature_c")
    compare = add.add_mutually_exclusive_group(required=True)
    for flag, sign in COMPARATORS.items():
        compare.add_argument(
            f"--{flag.replace('_', '-')}", dest=flag, metavar="N", help=f"fire while the value {sign} N"
        )
    add.add_argument(
        "--for",
        dest="for_",
        default="0",
        metavar="DURATION",
        help="how long it must hold: 300, 90s, 5m, 1h (default 0)",
    )
    add.add_argument("--severity", default="warning", help="info, warning or critical")
    add.add_argument("--channel", action="append", default=[], help="a channel to route it to (repeat for more)")
    lst = actions.add_parser("list", help="list your rules")
    lst.add_argument("--json", action="store_true", help="print the definitions as JSON (as `export` does)")
    rm = actions.add_parser("remove", help="remove a rule (what it has open is resolved)")
    rm.add_argument("name", help="the rule's name (without custom.)")
    for verb, what in (("enable", "switch a rule on"), ("disable", "switch a rule off (what it has open is resolved)")):
        actions.add_parser(verb, help=what).add_argument("name", help="the rule's name (without custom.)")
    actions.add_parser("export", help="print your rules as JSON (for `import`)")
    imp = actions.add_parser("import", help="create or replace rules from an export; all or nothing")
    imp.add_argument("file", help="a JSON file `export` wrote ('-': standard input)")


def run(command: BaseCommand, *, custom_action: str, **opts: Any) -> None:
    try:
        ACTIONS[custom_action](command, **opts)
    except ValidationError as exc:
        raise CommandError(custom_rule_reasons(exc)) from None


def _add(
    command: BaseCommand,
    *,
    name: str,
    engine: str,
    host: str | None,
    metric: str,
    for_: str,
    severity: str,
    channel: list[str],
    **opts: Any,
) -> None:
    comparator, threshold = next((COMPARATORS[f], opts[f]) for f in COMPARATORS if opts.get(f) is not None)
    data = {
        "name": name,
        "scope": "host" if host is not None else "engine",
        "engine": engine,
        "host": host or "",
        "metric": metric,
        "comparator": comparator,
        "threshold": threshold,
        "for": for_,
        "severity": severity,
        "channels": channel,
    }
    rule = custom_rule_create(data=data)
    command.stdout.write(f"added {rule.key}: {_line(rule)}")


def _line(rule: CustomRule) -> str:
    where = rule.engine or rule.host or f"every {rule.scope}"
    return f"{rule.metric} of {where} {rule.comparator} {rule.threshold:g} for {rule.for_s} s → {rule.severity}"


def _list(command: BaseCommand, *, json: bool, **_: Any) -> None:
    rules = custom_rules_export()
    if json:
        command.stdout.write(_dumps(rules))
        return
    if not rules:
        command.stdout.write("no custom rules")
    for r in CustomRule.objects.select_related("engine", "host"):
        command.stdout.write(f"custom.{r.name:<26} {_line(r)}")


def _remove(command: BaseCommand, *, name: str, **_: Any) -> None:
    rule = custom_rule_remove(name=name)
    command.stdout.write(f"removed {rule.key}")


def _enable(command: BaseCommand, *, name: str, **_: Any) -> None:
    rule = custom_rule_enable(name=name, enabled=True)
    command.stdout.write(f"{rule.key} enabled")


def _disable(command: BaseCommand, *, name: str, **_: Any) -> None:
    rule = custom_rule_enable(name=name, enabled=False)
    command.stdout.write(f"{rule.key} disabled")


def _export(command: BaseCommand, **_: Any) -> None:
    command.stdout.write(_dumps({"custom_rules": custom_rules_export()}))


def _import(command: BaseCommand, *, file: str, **_: Any) -> None:
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text()
        data = json.loads(text)
    except (OSError, ValueError) as exc:
        raise CommandError(f"cannot read {file}: {exc} (nothing imported)") from None
    rules = data.get("custom_rules") if isinstance(data, dict) else data
    done = custom_rules_import(rules=rules)
    command.stdout.write(f"imported {len(done)} custom rule{'s' if len(done) != 1 else ''}")


def _dumps(data: object) -> str:
    return json.dumps(data, indent=2)


ACTIONS: dict[str, Callable[..., None]] = {
    "add": _add,
    "list": _list,
    "remove": _remove,
    "enable": _enable,
    "disable": _disable,
    "export": _export,
    "import": _import,
}
