"""Engines are retired, never deleted (docs/design.md §1): history — change-log entries, both ledgers,
alerts, incidents, deliveries and benchmark runs — points at them for ever.

`sparkops engine remove NAME` retires: the engine is no longer polled (the resident poller
reads only engines with no `retired_at`), leaves the live view, and stops being expected up;
its samples age out by retention. `sparkops engine add NAME …` of a retired name watches it
again, with the kind and URL given. A change-log import that names an engine SparkOps never
knew creates it retired (`retired_record`), so the log keeps every name it was written with.

Also what the rest of the code asks about engines and hosts: the host by name
(`host_get_or_create`), an engine as the CLI and API print it (`engine_as_dict`), and how far
behind a live worker's stored report may be (`report_lag_s`)."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from dashboard.alerts.lifecycle import alerts_resolve_engine
from dashboard.forms import EngineForm
from dashboard.models import Engine, Host


def host_get_or_create(*, name=None):
    """The host NAME (default this box's, SPARKOPS_HOST_NAME), made when new."""
    host, _ = Host.objects.get_or_create(name=name or settings.SPARKOPS_HOST_NAME)
    return host


def form_errors_text(form):
    """A bound form's errors on one line: "field: message; …" ("error" for the non-field ones)."""
    return "; ".join(f"{'error' if f == '__all__' else f}: {e}" for f, errs in form.errors.items() for e in errs)


def report_lag_s():
    """How far behind a live worker's stored report (Host.last_report_at) may be: its resident
    poller stores every SPARKOPS_FLUSH_INTERVAL. Whoever judges a worker dead from it allows this much."""
    return max(settings.SPARKOPS_FLUSH_INTERVAL, settings.SPARKOPS_POLL_INTERVAL)


def engine_as_dict(engine):
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
def engine_add(*, name, kind, url, unit="", host=None, unit_scope="system", poll_interval_s=None):
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
def engine_retire(*, name):
    """Stop watching NAME; everything that points at it stays."""
    engine = Engine.objects.select_for_update().filter(name=name).first()
    if engine is None:
        raise ValidationError(f"no engine named {name!r}")
    if engine.retired_at is not None:
        raise ValidationError(f"engine {name!r} is already retired (since {engine.retired_at:%Y-%m-%d %H:%M} UTC)")
    engine.retired_at, engine.expected_up = timezone.now(), False
    engine.save(update_fields=["retired_at", "expected_up"])
    # Nothing polls it any more, so nothing would resolve its alerts: they close now, and no
    # rule fires for it again (dashboard/alerts/lifecycle.alert_observe).
    alerts_resolve_engine(engine=engine, reason="retired", now=engine.retired_at)
    return engine


def retired_record(name):
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
