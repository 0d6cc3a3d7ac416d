"""What the measuring commands (`sparkops bench run|sweep|rate|ab`, `sparkops probe run`) share when
they read their arguments: an engine by name, with the message that says where to look."""

from django.core.management.base import CommandError

from dashboard.models import Engine


def engine_named(name, *, flag=""):
    """The engine called NAME (its host joined), or a CommandError naming FLAG ("--b") when given."""
    engine = Engine.objects.select_related("host").filter(name=name).first()
    if engine is None:
        where = f"{flag}: " if flag else ""
        raise CommandError(f"{where}no engine named {name!r} (see `sparkops engine list`)")
    return engine
