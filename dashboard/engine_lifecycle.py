"""Engines are retired, never deleted (docs/design.md §1): history — change-log entries, both ledgers,
alerts, incidents, deliveries and benchmark runs — points at them for ever.

`sparkops engine remove NAME` retires: the engine is no longer polled (the resident poller
reads only engines with no `retired_at`), leaves the live view, and stops being expected up;
its samples age out by retention. `sparkops engine add NAME …` of a retired name watches it
again, with the kind and URL given. A change-log import that names an engine SparkOps never
knew creates it retired (`retired_record`), so the log keeps every name it was written with.

Also what the rest of the code asks about engines and hosts: the host by name
(`host_get_or_create`), an engine as the CLI and API print it (`engine_as_dict`), and how old an
engine's reading may be while a worker still polls it (`reading_stale_after_s`)."""

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from dashboard.clock import report_lag_s
from dashboard.forms import EngineForm
from dashboard.forms.errors import form_errors_text
from dashboard.models import Engine, Host
from dashboard.names import name_clean
from sparkops.alerts.lifecycle import alerts_resolve_engine


def host_get_or_create(*, name: str | None = None) -> Host:
    """The host NAME (default this box's, SPARKOPS_HOST_NAME), made when new: ValidationError
    when NAME cannot be a host's name (dashboard/names.py), before anything is made."""
    host, _ = Host.objects.get_or_create(name=name_clean(name or settings.SPARKOPS_HOST_NAME))
    return host


# A reading older than this many of its engine's poll intervals (plus the worker's store lag) is
# stale: no worker is polling the engine, so its status is only what it last was.
STALE_AFTER_INTERVALS = 3


def reading_stale_after_s(engine: Engine) -> float:
    """How old ENGINE's last reading may be while a worker still polls it (`engine list`, the Hosts grid)."""
    return (engine.poll_interval_s or settings.SPARKOPS_POLL_INTERVAL) * STALE_AFTER_INTERVALS + report_lag_s()


def engine_as_dict(engine: Engine) -> dict[str, Any]:
    """ENGINE as `sparkops engine list --json` and the API print it."""
    return {
        "name": engine.name,
        "kind": engine.kind,
        "url": engine.url,
        "unit": engine.unit or None,
        "unit_scope": engine.unit_scope,
        "host": engine.host.name,
        "status": engine.status,
        "status_reason": engine.status_reason,
        "last_poll_at": engine.last_poll_at.isoformat() if engine.last_poll_at else None,
    }


@transaction.atomic
def engine_add(
    *,
    name: str,
    kind: str,
    url: str,
    unit: str | None = "",
    host: str | None = None,
    unit_scope: str = "system",
    poll_interval_s: float | None = None,
) -> tuple[Engine, bool]:
    """Watch NAME: a new engine, or a retired one watched again. Returns (engine, reactivated)."""
    existing = Engine.objects.select_for_update().filter(name=name).first()
    if existing is not None and existing.retired_at is None:
        raise ValidationError(
            f"engine {name!r} already exists and is watched; 'sparkops engine remove {name}' retires it"
        )
    form = EngineForm(
        instance=existing,
        data={
            "name": name,
            "kind": kind,
            "url": url,
            "unit": unit or "",
            "unit_scope": unit_scope,
            "expected_up": True,
            "poll_interval_s": poll_interval_s if poll_interval_s is not None else "",
        },
    )
    if not form.is_valid():
        raise ValidationError(form_errors_text(form))
    engine = form.save(commit=False)
    engine.host = host_get_or_create(name=host)
    engine.retired_at = None
    if existing is not None:  # what it last read belongs to its old life
        engine.status, engine.status_reason, engine.status_changed_at = Engine.Status.UNKNOWN, "", timezone.now()
        engine.last_poll_at = engine.last_ok_at = None
        engine.latest = {}
    engine.save()
    return engine, existing is not None


@transaction.atomic
def engine_retire(*, name: str) -> Engine:
    """Stop watching NAME; everything that points at it stays."""
    engine = Engine.objects.select_for_update().filter(name=name).first()
    if engine is None:
        raise ValidationError(f"no engine named {name!r}")
    if engine.retired_at is not None:
        raise ValidationError(f"engine {name!r} is already retired (since {engine.retired_at:%Y-%m-%d %H:%M} UTC)")
    engine.retired_at, engine.expected_up = timezone.now(), False
    engine.save(update_fields=["retired_at", "expected_up"])
    # Nothing polls it any more, so nothing would resolve its alerts: they close now, and no
    # rule fires for it again (sparkops/alerts/lifecycle.alert_observe).
    alerts_resolve_engine(engine=engine, reason="retired", now=engine.retired_at)
    return engine


def retired_record(name: str) -> Engine:
    """An engine known only from history (a change-log import): retired from the start, never
    polled; 'sparkops engine add NAME --kind … --url …' watches it. Validates the name."""
    engine = Engine(
        name=name,
        kind=Engine.Kind.OPENAI,
        url="",
        host=host_get_or_create(),
        expected_up=False,
        retired_at=timezone.now(),
        status_reason="known from the change log only",
    )
    try:
        engine.full_clean(exclude=["url", "host"], validate_unique=False)  # a twin: IntegrityError, retried
    except ValidationError as exc:
        raise ValidationError(f"engine name {name!r}: {'; '.join(exc.messages)}") from None
    engine.save()
    return engine
