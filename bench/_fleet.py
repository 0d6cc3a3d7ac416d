"""The benches' engines: watched by name, the rest of the database's engines retired.

Engines are retired, never deleted (history points at them), so a bench that runs twice
against one database re-points its engines instead of deleting them."""

from django.utils import timezone


def watch_only(host, engines):
    """Make ENGINES ({name: {"kind", "url", "unit"...}}) the watched engines of HOST and retire
    every other engine in the database; the Engine rows, in ENGINES' order."""
    from dashboard.models import Engine

    rows = [
        Engine.objects.update_or_create(
            name=name,
            defaults={
                **fields,
                "host": host,
                "retired_at": None,
                "expected_up": True,
                "status": "unknown",
                "last_poll_at": None,
            },
        )[0]
        for name, fields in engines.items()
    ]
    Engine.objects.exclude(pk__in=[e.pk for e in rows]).filter(retired_at__isnull=True).update(
        retired_at=timezone.now()
    )
    return rows


def retire(engines):
    from dashboard.models import Engine

    Engine.objects.filter(pk__in=[e.pk for e in engines]).update(retired_at=timezone.now())
