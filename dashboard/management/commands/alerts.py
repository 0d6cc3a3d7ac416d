import json
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from dashboard.management.base import CliCommand
from dashboard.models import Engine
from sparkops.alerts import custom_cli, selectors, services
from sparkops.alerts.models import NotificationChannel


class Command(CliCommand):
    help = "List alerts, send a test notification, silence an engine or rule, tune a rule."

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        lst = sub.add_parser("list", help="list alerts")
        lst.add_argument("--state", default="open", help="open, pending, firing, resolved or '' for all")
        lst.add_argument("--rule", default="")
        lst.add_argument("--engine", default="")
        lst.add_argument("--json", action="store_true")
        test = sub.add_parser("test-channel", help="send a test notification through the outbox")
        test.add_argument("name")
        sil = sub.add_parser("silence", help="silence notifications of an engine and/or a rule")
        sil.add_argument("--engine", default=None)
        sil.add_argument("--rule", default="")
        sil.add_argument("--hours", type=float, required=True)
        sil.add_argument("--reason", default="")
        rule = sub.add_parser("rule", help="change a rule's settings, for all engines or one")
        rule.add_argument("key")
        rule.add_argument("--engine", default=None)
        rule.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
        rule.add_argument("--enable", action="store_true")
        rule.add_argument("--disable", action="store_true")
        custom_cli.add_parser(sub)

    def handle(self, *args: Any, action, **opts: Any):
        try:
            getattr(self, "do_" + action.replace("-", "_"))(**opts)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None

    def do_custom(self, **opts: Any) -> None:
        custom_cli.run(self, **opts)

    def do_list(self, *, state, rule, engine, json: bool, **_: Any) -> None:
        rows: list[dict[str, Any]] = [
            {
                "id": a.pk,
                "rule": a.rule,
                "severity": a.severity,
                "state": a.state,
                "subject": a.subject,
                "cause": a.cause,
                "message": a.message,
                "started_at": a.started_at.isoformat(),
                "resolved_at": a.resolved_at.isoformat() if a.resolved_at else None,
                "acknowledged": bool(a.acknowledged_at),
            }
            for a in selectors.alert_list(state=state, rule=rule, engine=engine)
        ]
        if json:
            self.stdout.write(_dumps(rows))
            return
        if not rows:
            self.stdout.write(_no_alerts_line(state=state, rule=rule, engine=engine))
        for r in rows:
            self.stdout.write(
                f"{r['id']:>6} {r['state']:<8} {r['severity']:<8} {r['rule']:<20} {r['subject']:<24} {r['message'][:80]}"
            )

    def do_test_channel(self, *, name, **_: Any):
        channel = NotificationChannel.objects.filter(name=name).first()
        if channel is None:
            raise CommandError(f"no channel named {name!r}")
        delivery = services.channel_send_test(channel=channel)
        self.stdout.write(f"queued test delivery {delivery.idempotency_key} to {channel.name}")
        if not settings.REDIS_URL:  # the outbox is sent by the stack's worker
            self.stderr.write(
                f"no SparkOps stack is running for the install at {settings.VAR_DIR} and REDIS_URL is not set: "
                "the delivery waits in the outbox until its worker runs (`sparkops up`)"
            )

    def do_silence(self, *, engine, rule, hours, reason, **_: Any):
        target = _engine(engine) if engine else None
        if target is None and not rule:
            raise CommandError("name an --engine, a --rule, or both")
        silence = services.silence_create(engine=target, rule=rule, hours=hours, reason=reason)
        self.stdout.write(f"{silence}")

    def do_rule(self, *, key, engine, set, enable, disable, **_: Any):
        params = {}
        for item in set:
            name, sep, value = item.partition("=")
            if not sep:
                raise CommandError(f"--set {item!r}: use NAME=VALUE")
            params[name.strip()] = value.strip()
        enabled = True if enable else False if disable else None
        services.rule_update(key=key, engine=_engine(engine) if engine else None, params=params, enabled=enabled)
        self.stdout.write(f"rule {key} updated" + (f" for {engine}" if engine else ""))


def _engine(name):
    engine = Engine.objects.filter(name=name).first()
    if engine is None:
        raise CommandError(f"no engine named {name!r}")
    return engine


def _no_alerts_line(*, state, rule, engine):
    """What an empty list says: which alerts there are none of (`--state ''` for every state)."""
    named = ", ".join(f"{key} {value}" for key, value in (("rule", rule), ("engine", engine)) if value)
    return f"no {state + ' ' if state else ''}alerts" + (f" with {named}" if named else "")


def _dumps(data):
    return json.dumps(data, indent=2)
