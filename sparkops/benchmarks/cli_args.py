"""What the measuring commands (`sparkops bench run|sweep|rate|ab`, `sparkops probe run`) share when
they read their arguments: an engine by name, with the message that says where to look."""

import argparse

from django.core.management.base import CommandError

from dashboard.models import Engine


def engine_named(name, *, flag=""):
    """The engine called NAME (its host joined), or a CommandError naming FLAG ("--b") when given."""
    engine = Engine.objects.select_related("host").filter(name=name).first()
    if engine is None:
        where = f"{flag}: " if flag else ""
        raise CommandError(f"{where}no engine named {name!r} (see `sparkops engine list`)")
    return engine


def whole(value):
    """An argparse type: a whole number ≥ 0, else the message argparse prints with the flag's name
    ("argument --reps: 'x' is not a whole number"; a ValueError would print "invalid whole value")."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value!r} must not be negative")
    return number
