import json
from argparse import ArgumentParser
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from dashboard.management.base import CliCommand
from sparkops.alerts.models import NotificationChannel
from sparkops.alerts.services import channel_as_dict, channel_create


class Command(CliCommand):
    help = "Add or list notification channels (email, webhook, Apprise: chat and push services by URL)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="add a channel")
        add.add_argument("name")
        target = add.add_mutually_exclusive_group(required=True)
        target.add_argument("--email", metavar="ADDRESS")
        target.add_argument("--webhook", metavar="URL")
        target.add_argument(
            "--apprise",
            metavar="URL",
            help="an Apprise URL: slack://…, discord://…, tgram://…, ntfy://…, pover://…, json://…",
        )
        add.add_argument("--secret", default="", help="HMAC-SHA256 key for X-SparkOps-Signature (webhook)")
        add.add_argument(
            "--format", choices=["sparkops", "alertmanager"], default="sparkops", help="webhook body format"
        )
        lst = sub.add_parser("list", help="list channels")
        lst.add_argument("--json", action="store_true")

    def handle(self, *args: Any, action, **opts: Any) -> None:
        if action == "add":
            self.do_add(**opts)
        else:
            self.do_list(**opts)

    def do_add(self, *, name, email, webhook, apprise, secret, format, **_: Any):
        if (email is not None or apprise is not None) and secret:
            raise CommandError("--secret applies to webhooks only")
        kind = "email" if email is not None else "apprise" if apprise is not None else "webhook"
        try:
            channel = channel_create(
                name=name,
                kind=kind,
                address=email or "",
                url=(apprise if kind == "apprise" else webhook) or "",
                secret=secret,
                format=format,
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        self.stdout.write(f"added {channel.kind} channel {channel.name} -> {channel.target}")

    def do_list(self, *, json: bool, **_: Any) -> None:
        channels = [channel_as_dict(c) for c in NotificationChannel.objects.all()]
        if json:
            self.stdout.write(_dump(channels))
            return
        if not channels:
            self.stdout.write(
                "no notification channels (add one: sparkops channel add NAME --email|--webhook|--apprise …)"
            )
        for c in channels:
            self.stdout.write(f"{c['name']:<20} {c['kind']:<8} {c['health']:<8} {c['target']}")


def _dump(data):
    return json.dumps(data, indent=2)
