"""The audit page's fixes, applied by the box's own worker (like the Restart button, dashboard.unit_actions).

The web never writes a unit's files: an admin's request is a Celery task on the queue `host.<name>`,
so it runs on the box that owns the unit, and that worker refuses it unless its own environment has
SPARKOPS_UNIT_ACTIONS=1. The request and its outcome are written in the change log as notes of the
engine ("Unit fix …"); the fix's own effect is the observed entry the launch observer writes, which
the outcome names."""

import logging
from collections.abc import Sequence

from celery import shared_task
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from dashboard.models import Engine
from dashboard.roles import require_role
from sparkops.audit.checks import CHECKS
from sparkops.changelog.models import SPARKOPS_AUTHOR, Entry
from sparkops.changelog.services import entry_create
from sparkops.controls import unitfix
from sparkops.launch.observer import observe_now
from sparkops.poller.fleet import require_reachable

log = logging.getLogger(__name__)
TITLE = "Unit fix"  # the first words of every note this module writes: the page lists them by it


def _note(engine: Engine, title: str, body: str) -> Entry:
    """A note in the change log, SparkOps's own record (locked when written): who asked is in its title."""
    return entry_create(
        author=None,
        author_name=SPARKOPS_AUTHOR,
        effective_at=timezone.now(),
        title=title[:200],
        kind="incident_note",
        engines=[engine],
        units=engine.unit,
        body_md=body,
    )


def fix_request(*, engine: Engine, checks: Sequence[str], user: User) -> Entry:
    """Queue the drop-ins of CHECKS for ENGINE's unit on its box's worker; the request's note."""
    require_role(user, "admin")
    checks = [c for c in checks if c]
    unknown = [c for c in checks if c not in CHECKS]
    if not checks or unknown:
        raise ValidationError(
            f"Name the checks to fix (unknown: {', '.join(unknown)})." if unknown else "No check named."
        )
    if not engine.unit:
        raise ValidationError(f"{engine.name} has no systemd unit: there is nothing to add a drop-in to.")
    if not (engine.host_id and engine.host.unit_actions):
        raise ValidationError(
            f"Unit actions are off on {engine.host.name if engine.host_id else 'its box'}: "
            "start that box's worker with SPARKOPS_UNIT_ACTIONS=1 to allow them."
        )
    require_reachable(engine.host)  # refused now, not written whenever its worker comes back
    files = ", ".join(f"{unitfix.PREFIX}{c}.conf" for c in checks)
    with transaction.atomic():
        entry = _note(
            engine,
            f"{TITLE} of {engine.unit} requested by {user.username} (through {engine.host.queue}): {files}",
            f"From the launch audit of {engine.name} on {engine.host.name}: the drop-ins {files}, "
            f"written by the box's worker into {engine.unit}'s drop-in directory, then `daemon-reload`.",
        )
        args = [engine.pk, checks, user.pk]
        transaction.on_commit(lambda: unit_fix.apply_async(args=args, queue=engine.host.queue))
    return entry


def outcome_text(engine: Engine, plan: unitfix.Plan) -> tuple[str, str]:
    """(title, body) of the note that says how a fix went on the box."""
    box = engine.host.name if engine.host_id else "its box"
    if plan.refused:
        return f"{TITLE} of {engine.unit} on {box} refused: {plan.refused}", "Nothing was written."
    if not plan.applied:
        skipped = "; ".join(f"{s['check']}: {s['why']}" for s in plan.skipped) or "every check passes"
        return f"{TITLE} of {engine.unit} on {box}: nothing to write", skipped
    files = ", ".join(f.path for f in plan.fixes)
    body = [f"Written on {box}: {files}; `daemon-reload`: {plan.daemon_reload}.", ""]
    body += [f"```diff\n{f.diff}```" for f in plan.fixes]
    if plan.entry:
        body += ["", f"The observed change: [entry {plan.entry['id']}]({plan.entry['url']}) — {plan.entry['title']}."]
    return f"{TITLE} of {engine.unit} on {box}: wrote {', '.join(f.file for f in plan.fixes)}", "\n".join(body)


@shared_task(name="dashboard.unit_fix", ignore_result=True)
def unit_fix(engine_id: int, checks: Sequence[str], user_id: int | None) -> Entry:
    """On the unit's own box: plan the drop-ins from what systemd says now, write them, reload, observe."""

    engine = Engine.objects.select_related("host").get(pk=engine_id)
    user = get_user_model().objects.filter(pk=user_id).first() if user_id else None
    if not settings.SPARKOPS_UNIT_ACTIONS:
        return _note(
            engine,
            f"{TITLE} of {engine.unit} refused on {engine.host.name}: SPARKOPS_UNIT_ACTIONS is not set on its worker",
            "Nothing was written.",
        )
    for peer in Engine.objects.filter(host_id=engine.host_id, retired_at__isnull=True).exclude(unit=""):
        observe_now(peer)
    plan = unitfix.apply(engine, unitfix.plan(engine, checks=checks, live=True))
    title, body = outcome_text(engine, plan)
    log.info("unit fix by %s: %s", user, title)
    return _note(engine, title, body)
