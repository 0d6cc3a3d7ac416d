"""The fix on the page: the exact systemd commands for a down engine's unit, and (for admins, on a
box whose worker runs with SPARKOPS_UNIT_ACTIONS=1) a restart through that box's own worker queue.

The web never runs systemctl itself: the restart is a Celery task on the queue `host.<name>`, so it
runs on the box that owns the unit, and that worker refuses it unless its own environment allows it.
Every request and its outcome is written on the alert's timeline and in the change log."""

import logging
import shlex
import subprocess
from typing import Any

from celery import shared_task
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from dashboard.models import Engine
from dashboard.roles import require_role
from sparkops.alerts.models import AlertEvent
from sparkops.alerts.notes import note_add
from sparkops.audit.checks import RESTART_DROPIN
from sparkops.changelog.models import SPARKOPS_AUTHOR
from sparkops.changelog.services import entry_create
from sparkops.collectors import asked
from sparkops.poller.fleet import require_reachable

log = logging.getLogger(__name__)
# The drop-in the launch audit's restart_always_bounded check suggests: one text, on the card and the audit page.
DROPIN = RESTART_DROPIN.name
DROPIN_TEXT = RESTART_DROPIN.text
RESTART_TIMEOUT_S = 120


def fix_commands(engine: Engine) -> list[tuple[str, str]]:
    """[(label, command)] for ENGINE's unit, to copy and paste into a shell on its box; [] without a unit.
    Each works pasted as it is (issue 47): the scope's systemctl and the unit's name in every one, a
    user unit's drop-in under $XDG_CONFIG_HOME (where its manager reads it, ~/.config by default), and
    the Restart=always drop-in only for a unit whose observed configuration lacks it."""
    unit = engine.unit
    if not unit:
        return []
    u = shlex.quote(unit)
    printf = "printf " + shlex.quote(DROPIN_TEXT.replace("\n", "\\n"))
    if engine.unit_scope == "user":  # the user's own manager: no sudo, drop-ins where it reads them
        folder, ctl, sudo = f'"${{XDG_CONFIG_HOME:-$HOME/.config}}/systemd/user/{unit}.d"', "systemctl --user", ""
    else:
        folder, ctl, sudo = shlex.quote(f"/etc/systemd/system/{unit}.d"), "sudo systemctl", "sudo "
    commands = [
        ("Start it again", f"{ctl} restart {u}"),
        ("After “start request repeated too quickly” (start limit hit)", f"{ctl} reset-failed {u} && {ctl} start {u}"),
    ]
    if _restart_of(engine) != "always":
        commands.append(
            (
                "Restart it on every exit from now on (a drop-in setting Restart=always)",
                f"{sudo}mkdir -p {folder} && {printf} | {sudo}tee {folder}/{DROPIN} && {ctl} daemon-reload",
            )
        )
    return commands


def _restart_of(engine: Engine) -> str | None:
    """The unit's Restart= as last observed (its latest configuration snapshot), or None."""
    from sparkops.launch.snapshot import latest_snapshot

    snap = latest_snapshot(engine)
    return (((snap.data if snap is not None else None) or {}).get("unit") or {}).get("restart")


def can_restart(engine: Engine) -> bool:
    """The box allows unit actions (its worker said so when it started) and the engine has a unit."""
    return bool(engine.unit and engine.host_id and getattr(engine.host, "unit_actions", False))


def _open_event(engine: Engine) -> AlertEvent | None:

    return (
        AlertEvent.objects.filter(engine=engine, state__in=AlertEvent.OPEN_STATES)
        .order_by("severity", "-started_at")
        .first()
    )  # "critical" sorts before "warning"


def _note(engine: Engine, event: AlertEvent | None, kind: str, text: str, *, user: User | None = None) -> None:
    """TEXT on the alert's timeline (when one is open) and in the change log as an incident note."""

    if event is not None:
        note_add(event, kind, text, user=user)
    entry_create(  # SparkOps's own record, locked when written: who asked is in its text
        author=None,
        author_name=SPARKOPS_AUTHOR,
        effective_at=timezone.now(),
        title=text[:200],
        kind="incident_note",
        engines=[engine],
        units=engine.unit,
        body_md=f"From the engine card of {engine.name} on {engine.host.name}."
        + (f" Alert #{event.pk} ({event.rule})." if event is not None else ""),
    )


def restart_request(*, engine: Engine, user: User) -> AlertEvent | None:
    """Queue a restart of ENGINE's unit on its box's worker; returns the alert event it was noted on (or None).
    Refused (`BoxUnreachable`, a ValidationError) when that worker stopped reporting: nothing is written."""
    require_role(user, "admin")
    if not engine.unit:
        raise ValidationError(f"{engine.name} has no systemd unit to restart.")
    if not can_restart(engine):
        raise ValidationError(
            f"Unit actions are off on {engine.host.name if engine.host_id else 'its box'}: "
            "start that box's worker with SPARKOPS_UNIT_ACTIONS=1 to allow them."
        )
    require_reachable(engine.host)  # a restart queued for a gone worker would run whenever it came back
    with transaction.atomic():
        event = _open_event(engine)
        _note(
            engine,
            event,
            "unit_action",
            f"Restart of {engine.unit} requested by {user.username} (through {engine.host.queue})",
            user=user,
        )
        args = [engine.pk, event.pk if event is not None else None, user.pk]
        transaction.on_commit(lambda: unit_restart.apply_async(args=args, queue=engine.host.queue))
    return event


def _run(*args: Any) -> tuple[bool, str]:
    argv = [*shlex.split(settings.SPARKOPS_SYSTEMCTL), *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=RESTART_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    out = (done.stderr or done.stdout or "").strip().splitlines()
    return done.returncode == 0, (out[-1] if out else f"exit status {done.returncode}")


@shared_task(name="dashboard.unit_restart", ignore_result=True)
def unit_restart(engine_id: int, event_id: int | None, user_id: int | None) -> None:
    """On the unit's own box: reset-failed, then restart; the outcome goes where the request went."""

    engine = Engine.objects.select_related("host").get(pk=engine_id)
    event = AlertEvent.objects.filter(pk=event_id).first() if event_id else None
    user = get_user_model().objects.filter(pk=user_id).first() if user_id else None
    if not settings.SPARKOPS_UNIT_ACTIONS:
        _note(
            engine,
            event,
            "unit_action",
            f"Restart of {engine.unit} refused on {engine.host.name}: SPARKOPS_UNIT_ACTIONS is not set on its worker",
        )
        return
    scope = ["--user"] if engine.unit_scope == "user" else []
    # The restart's job is then read by this worker's exit path: the page says who asked.
    asked.note(engine.unit, f"{user.username} (the Restart button)" if user is not None else "the Restart button")
    _run(*scope, "reset-failed", engine.unit)  # a unit past its start limit refuses a plain restart
    ok, detail = _run(*scope, "restart", engine.unit)
    text = (
        f"systemctl restart {engine.unit} on {engine.host.name}: done"
        if ok
        else f"systemctl restart {engine.unit} on {engine.host.name} failed: {detail}"
    )
    log.info("unit action by %s: %s", user, text)
    _note(engine, event, "unit_action", text)
