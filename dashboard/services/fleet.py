"""Services for hosts and engines (keyword-only, validated through the forms)."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from dashboard.forms import EngineForm
from dashboard.models import Host


def host_get_or_create(*, name=None):
    host, _ = Host.objects.get_or_create(name=name or settings.SPARKOPS_HOST_NAME)
    return host


def report_lag_s():
    """How far behind a live worker's stored report (Host.last_report_at) may be: its resident
    poller stores every SPARKOPS_FLUSH_INTERVAL. Whoever judges a worker dead from it allows this much."""
    return max(settings.SPARKOPS_FLUSH_INTERVAL, settings.SPARKOPS_POLL_INTERVAL)


def form_errors_text(form):
    parts = []
    for field, errors in form.errors.items():
        label = "error" if field == "__all__" else field
        parts.extend(f"{label}: {err}" for err in errors)
    return "; ".join(parts)


@transaction.atomic
def engine_create(*, name, kind, url, unit="", host=None, unit_scope="system", poll_interval_s=None):
    form = EngineForm(
        data={
            "name": name,
            "kind": kind,
            "url": url,
            "unit": unit or "",
            "unit_scope": unit_scope,
            "expected_up": True,
            "poll_interval_s": poll_interval_s if poll_interval_s is not None else "",
        }
    )
    if not form.is_valid():
        raise ValidationError(form_errors_text(form))
    engine = form.save(commit=False)
    engine.host = host_get_or_create(name=host)
    engine.save()
    return engine


def engine_as_dict(engine):
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
