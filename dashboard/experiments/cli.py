"""`sparkops bench ab` (issue 18): arguments and handler, called by management/commands/bench.py."""

from django.core.management.base import CommandError


def add_arguments(parser):
    parser.add_argument("--json", action="store_true")


def handle(command, **opts):
    raise CommandError("`sparkops bench ab` is not built yet")
