"""/healthz: lets an outside checker watch the watcher; /livez: the web process answers. No login."""

from datetime import timedelta
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError, connection, transaction
from django.db.models import Max
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from dashboard.clock import db_now, skew_text
from dashboard.dbfail import unavailable
from dashboard.engine_lifecycle import report_lag_s
from dashboard.models import Engine, Host
from dashboard.samples.store import states_put

STALE_AFTER_INTERVALS = 3
WRITE_CHECK_KEY = "healthz:write"  # the CollectorState row the write check upserts


def _check_database():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    # A SELECT answers on a full disk or a read-only database, where every poll, alert and
    # login fails: the check writes, one committed row.
    try:
        with transaction.atomic():
            states_put({WRITE_CHECK_KEY: {}})
    except DatabaseError as exc:
        raise DatabaseError(f"cannot be written: {unavailable(exc) or exc}") from exc


def _check_redis():

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=1, socket_connect_timeout=1)
    try:
        client.ping()
    finally:
        client.close()


def _latest_poll():
    engine_poll = Engine.objects.aggregate(t=Max("last_poll_at"))["t"]
    host_poll = Host.objects.aggregate(t=Max("last_report_at"))["t"]
    times = [t for t in (engine_poll, host_poll) if t]
    return max(times) if times else None


def _stale_hosts(limit, now):
    """Hosts whose own worker has not reported within LIMIT (the collector-stale condition), and
    live ones whose clock is off the database's (what they measured when they last stored)."""
    for name, reported, latest in Host.objects.values_list("name", "last_report_at", "latest"):
        if reported is None:
            yield f"host {name}: its worker has never reported"
        elif now - reported > limit:
            yield f"host {name}: its worker has not reported for {int((now - reported).total_seconds())} s"
        else:
            skew = skew_text(f"host {name}", latest.get("clock_offset_s") if isinstance(latest, dict) else None)
            if skew:
                yield f"clock: {skew}"


@login_not_required
@require_GET
def livez(request):  # noqa: ARG001 (a view's signature)
    """Liveness only (no database, no Redis): what a container or proxy healthcheck of the web
    process asks, so a database outage does not get the web container restarted in a loop.
    /healthz stays the deep check of the whole stack."""
    return HttpResponse("ok\n", content_type="text/plain")


@login_not_required
@require_GET
def healthz(request):  # noqa: ARG001 (a view's signature)
    body = health_report()
    return JsonResponse(body, status=200 if body["status"] == "ok" else 503)


def health_report():
    """What /healthz says, as a dict: status "ok" or "unhealthy", the problems, the checks.
    The heartbeat (dashboard/heartbeat.py) sends its verdict outside."""
    problems: list[str] = []
    body: dict[str, Any] = {}
    for name, check in (("database", _check_database), ("redis", _check_redis)):
        try:
            check()
            body[name] = "ok"
        except Exception as exc:  # any failure is the answer, not a crash
            body[name] = "error"
            problems.append(f"{name}: {exc}")
    latest = _latest_poll() if body["database"] == "ok" else None
    limit = timedelta(seconds=settings.SPARKOPS_POLL_INTERVAL * STALE_AFTER_INTERVALS + report_lag_s())
    body["latest_poll"] = latest.isoformat() if latest else None
    if body["database"] == "ok":
        now = db_now()  # the workers' reports are stamped with the database's clock
        if latest is None:
            problems.append("poll: no poll has completed yet")
        elif now - latest > limit:
            problems.append(f"poll: the latest poll is {int((now - latest).total_seconds())} s old")
        problems.extend(_stale_hosts(limit, now))
    body["status"] = "ok" if not problems else "unhealthy"
    body["problems"] = problems
    return body
