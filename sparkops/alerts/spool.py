"""The page path without the database: a worker's spool of alerts it fired while the database was away.

The outbox (`outbox.py`) writes a Delivery row before it sends; with the database down, full or
read-only that row cannot be written, and a death seen then went unpaged until the database
returned (issue 46). So a worker's poller keeps what a page needs between ticks: the enabled
channels, their routes and the silences in force (`Routing`, read every time its alert memory
reads the rules, and kept in ROUTING_FILE so a worker restarted during an outage has them too).
When a rule fires and the database cannot take the event, `Spool.hold`:

1. writes the alert and one send per channel to a file of its own in the spool directory
   (SPARKOPS_SPOOL_DIR, default the var dir's spool/<host>), fsync'd before anything is sent,
   so a worker killed or restarted now still has it;
2. sends it on a thread of its own through the channels' transports, each with its own
   idempotency key (`sparkops-spool-<id>-firing-<channel>`), retrying transient failures with
   the outbox's backoff; each result is written to the file as it comes;
3. when the database takes writes again, `catch_up` writes the alert as it was seen — its
   `started_at` the time the death was seen, not the time of the write — with its deliveries
   already sent (same keys, an attempt each), sends left unsent become outbox rows under the
   same keys (the outbox sends them once), a resolution seen meanwhile resolves it, and the
   file goes. A send in flight is waited for: no delivery is made by both paths."""

import json
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.urls import reverse

from dashboard.clock import db_now, to_shared

from . import conf
from .finding import Finding
from .lifecycle import alert_observe
from .models import AlertEvent, Delivery, DeliveryAttempt, MaintenanceWindow, NotificationChannel, Silence
from .notes import note_add
from .outbox import backoff_s, enqueue_on_commit, notify
from .publish import alert_changed
from .transports import TransportError, transport_for

log = logging.getLogger(__name__)
ROUTING_FILE = "routing.json"
VIA = "sent from the worker's spool while the database was away"


def spool_dir(host_name: str) -> Path:
    base = settings.SPARKOPS_SPOOL_DIR or Path(settings.VAR_DIR) / "spool"
    return Path(base) / host_name


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _parse(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _write(path: Path, data: dict) -> None:
    """DATA as PATH, durably: a temporary file fsync'd, renamed over PATH, the directory fsync'd."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, json.dumps(data, separators=(",", ":"), default=str).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# --- what a page needs, read while the database answers -----------------------------


@dataclass
class Routing:
    """The enabled channels with their routes, and the silences and maintenance windows not
    over yet, as last read from the database (plain dicts, so they can be kept in a file)."""

    channels: list[dict] = field(default_factory=list)  # {pk, name, kind, config, secret, routes: [(rule, min)]}
    silences: list[dict] = field(default_factory=list)  # {engine, host, rule, starts, ends}
    read_at: float = float("-inf")

    @classmethod
    def read(cls) -> "Routing":
        now = db_now()
        channels = [
            {
                "pk": c.pk,
                "name": c.name,
                "kind": c.kind,
                "config": c.config,
                "secret": c.secret,
                "routes": [(r.rule, r.min_severity) for r in c.routes.all()],
            }
            for c in NotificationChannel.objects.filter(enabled=True).prefetch_related("routes").order_by("pk")
        ]
        silences = [
            {"engine": s.engine_id, "host": s.host_id, "rule": s.rule, "starts": None, "ends": _iso(s.until)}
            for s in Silence.objects.filter(until__gt=now)
        ] + [
            {"engine": w.engine_id, "host": w.host_id, "rule": "", "starts": _iso(w.starts_at), "ends": _iso(w.ends_at)}
            for w in MaintenanceWindow.objects.filter(ends_at__gt=now)
        ]
        return cls(channels, silences, time.monotonic())

    def suppressed(self, *, rule: str, engine: Any, host: Any, now: datetime) -> bool:
        """As `outbox.suppression_of` judges it, from what was read."""
        engine_id = getattr(engine, "pk", None)
        host_ids = {getattr(host, "pk", None), getattr(engine, "host_id", None)} - {None}
        for s in self.silences:
            if s["rule"] and s["rule"] != rule:
                continue
            if s["engine"] is not None and s["engine"] != engine_id:
                continue
            if s["engine"] is None and s["host"] is not None and s["host"] not in host_ids:
                continue
            starts, ends = _parse(s["starts"]), _parse(s["ends"])
            if (starts is None or starts <= now) and ends is not None and now < ends:
                return True
        return False

    def channels_for(self, *, rule: str, severity: str) -> list[dict]:
        """As `outbox.channels_for`: a channel with no route hears every rule."""
        from .severity import SEVERITY_RANK

        return [
            c
            for c in self.channels
            if not c["routes"]
            or any((not r or r == rule) and SEVERITY_RANK[severity] >= SEVERITY_RANK[m] for r, m in c["routes"])
        ]


# --- the spool ----------------------------------------------------------------------


class Spool:
    """The alerts one worker fired while the database was away, one file each in DIRECTORY."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.Lock()  # the entries and their files
        self._sending: dict[str, threading.Lock] = {}  # entry id -> held while one of its sends is made
        self._catching_up = threading.Lock()  # the probe's and the metrics thread's catch-ups, one at a time
        self.entries: dict[str, dict] = {}
        for path in sorted(self.directory.glob("alert-*.json")):
            try:
                entry = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                log.error("spool: %s cannot be read (%s); left where it is", path, exc)
                continue
            self.entries[entry["id"]] = entry
            self._sending[entry["id"]] = threading.Lock()
        self.routing = self._routing_kept()

    def __len__(self) -> int:
        return len(self.entries)

    def holding(self, rule: str, subject: str) -> dict | None:
        """The unresolved entry of RULE and SUBJECT, if this spool holds one."""
        return next(
            (e for e in self.entries.values() if e["rule"] == rule and e["subject"] == subject and not e["resolved"]),
            None,
        )

    # Routing: kept in memory and in a file, so a restarted worker still knows where to page.
    def routing_refresh(self) -> None:
        routing = Routing.read()
        changed = (routing.channels, routing.silences) != (self.routing.channels, self.routing.silences)
        self.routing = routing
        if changed:
            try:
                _write(self.directory / ROUTING_FILE, {"channels": routing.channels, "silences": routing.silences})
            except OSError as exc:
                log.warning("spool: the channels could not be kept in %s (%s)", self.directory, exc)

    def _routing_kept(self) -> Routing:
        try:
            data = json.loads((self.directory / ROUTING_FILE).read_text())
        except (OSError, ValueError):
            return Routing()
        return Routing(data.get("channels") or [], data.get("silences") or [])

    def hold(self, *, rule: str, finding: Finding, severity: str, seen: datetime) -> dict | None:
        """Fire FINDING of RULE from here: written, fsync'd, then sent on a thread of its own.
        SEEN: when the condition was seen (this process's clock). None when it is suppressed by
        a silence in force or no channel hears it (written nonetheless, for the record)."""
        now = datetime.now(UTC)
        entry_id = uuid.uuid4().hex[:16]
        engine, host = finding.engine, finding.host
        suppressed = self.routing.suppressed(rule=rule, engine=engine, host=host, now=to_shared(now))
        channels = [] if suppressed else self.routing.channels_for(rule=rule, severity=severity)
        entry: dict[str, Any] = {
            "id": entry_id,
            "rule": rule,
            "subject": finding.subject,
            "severity": severity,
            "engine": getattr(engine, "pk", None),
            "host": getattr(host, "pk", None),
            "cause": finding.cause,
            "message": finding.message,
            "details": finding.details,
            "seen_at": _iso(seen),
            "shared_seen_at": _iso(to_shared(seen)),
            "held_at": _iso(now),
            "suppressed": suppressed,
            "resolved": None,
            "sends": [
                {
                    "channel": c["pk"],
                    "name": c["name"],
                    "key": f"sparkops-spool-{entry_id}-firing-{c['pk']}",
                    "payload": self._payload(entry_id, rule, severity, finding, seen, now),
                    "sent_at": None,
                    "attempts": 0,
                    "error": "",
                    "permanent": False,
                    "ms": None,
                }
                for c in channels
            ],
        }
        with self._lock:
            self.entries[entry_id] = entry
            self._sending[entry_id] = threading.Lock()
            try:
                _write(self._path(entry_id), entry)
            except OSError as exc:  # a full disk holds the database and the spool alike: page anyway
                log.error("spool: %s could not be written (%s); paging without it", rule, exc)
        log.warning(
            "alert %s for %s fired while the database is away: paging %s from the spool",
            rule,
            finding.subject,
            ", ".join(s["name"] for s in entry["sends"]) or "no channel",
        )
        if entry["sends"]:
            threading.Thread(
                target=self._send_all, args=(entry,), name=f"sparkops-spool-{entry_id}", daemon=True
            ).start()
        return entry if entry["sends"] else None

    def resolve_seen(self, *, rule: str, finding: Finding, seen: datetime) -> None:
        """FINDING (inactive) ends what this spool holds for its subject: said at the catch-up."""
        with self._lock:
            entry = self.holding(rule, finding.subject)
            if entry is None:
                return
            entry["resolved"] = {
                "at": _iso(to_shared(seen)),
                "resolution": finding.resolution,
                "resolved_by": finding.resolved_by,
            }
            try:
                _write(self._path(entry["id"]), entry)
            except OSError as exc:
                log.warning("spool: the resolution of %s could not be written (%s)", finding.subject, exc)

    def _payload(self, entry_id, rule, severity, finding, seen, now) -> dict:
        """What `payloads.event_payload` says, without the event's id (the database has not got
        it yet): the link goes to the alert list."""
        engine, host = finding.engine, finding.host
        host_name = getattr(host, "name", None) or (getattr(getattr(engine, "host", None), "name", None))
        return {
            "id": None,
            "spool_id": entry_id,
            "transition": "firing",
            "rule": rule,
            "severity": severity,
            "state": "firing",
            "subject": finding.subject,
            "engine": getattr(engine, "name", None),
            "host": host_name,
            "cause": finding.cause,
            "message": finding.message,
            "latest": None,
            "resolution": None,
            "started_at": _iso(to_shared(seen)),
            "resolved_at": None,
            "sent_at": _iso(to_shared(now)),
            "link": f"{settings.SITE_URL}{reverse('alerts:index')}",
            "note": VIA,
        }

    def _path(self, entry_id: str) -> Path:
        return self.directory / f"alert-{entry_id}.json"

    def _send_all(self, entry: dict) -> None:
        """Send each of ENTRY's pages until sent, refused for good, caught up by the outbox, or
        retried for conf.retry_for_s()."""
        began = time.monotonic()
        attempts = 0
        while True:
            left = [s for s in entry["sends"] if s["sent_at"] is None and not s["permanent"]]
            if not left or entry.get("caught_up") or time.monotonic() - began >= conf.retry_for_s():
                return
            for send in left:
                self._send_one(entry, send)
            attempts += 1
            if any(s["sent_at"] is None and not s["permanent"] for s in entry["sends"]):
                time.sleep(backoff_s(attempts))

    def _send_one(self, entry: dict, send: dict) -> None:
        channel_row = next((c for c in self.routing.channels if c["pk"] == send["channel"]), None)
        with self._sending[entry["id"]]:
            if entry.get("caught_up") or channel_row is None:
                return
            channel = NotificationChannel(
                pk=channel_row["pk"],
                name=channel_row["name"],
                kind=channel_row["kind"],
                config=channel_row["config"],
                secret=channel_row["secret"],
            )
            delivery = Delivery(channel=channel, payload=send["payload"], idempotency_key=send["key"])
            started = time.monotonic()
            try:
                transport_for(channel).send(delivery)
            except TransportError as exc:
                send["error"], send["permanent"] = str(exc)[:2000], exc.permanent
            except Exception as exc:  # a transport's bug is permanent for this send, never the thread's end
                log.exception("spool: transport crashed on %s", send["key"])
                send["error"], send["permanent"] = f"internal error: {exc}", True
            else:
                send["sent_at"], send["error"] = _iso(datetime.now(UTC)), ""
            send["attempts"] += 1
            send["ms"] = (time.monotonic() - started) * 1000
            with self._lock:
                try:
                    _write(self._path(entry["id"]), entry)
                except OSError as exc:
                    log.warning("spool: the result of %s could not be written (%s)", send["key"], exc)
        if send["sent_at"]:
            log.warning("spool: %s paged to %s in %.0f ms", entry["subject"], send["name"], send["ms"])
        else:
            log.warning("spool: paging %s to %s failed: %s", entry["subject"], send["name"], send["error"])

    # --- the record catches up ---------------------------------------------------------

    def catch_up(self) -> int:
        """Write every held alert to the database (see the module's docstring); how many were.
        A database error is raised (the entries stay for the next try)."""
        done = 0
        with self._catching_up:
            with self._lock:
                held = sorted(self.entries.values(), key=lambda e: e["held_at"])
            for entry in held:
                entry_id = entry["id"]
                with self._sending[entry_id]:  # no send of it in flight from here on
                    self._record(entry)
                    entry["caught_up"] = True
                with self._lock:
                    self.entries.pop(entry_id, None)
                    self._sending.pop(entry_id, None)
                    self._path(entry_id).unlink(missing_ok=True)
                done += 1
        return done

    def _record(self, entry: dict) -> None:
        from dashboard.models import Engine, Host, Incident

        started = _parse(entry["shared_seen_at"])
        assert started is not None
        with transaction.atomic():
            engine = (
                Engine.objects.filter(pk=entry["engine"]).select_related("host").first() if entry["engine"] else None
            )
            host = Host.objects.filter(pk=entry["host"]).first() if entry["host"] else None
            event = (
                AlertEvent.objects.select_for_update()
                .filter(rule=entry["rule"], subject=entry["subject"], state__in=AlertEvent.OPEN_STATES)
                .first()
            )
            if event is None:
                event = AlertEvent.objects.create(
                    rule=entry["rule"],
                    severity=entry["severity"],
                    subject=entry["subject"],
                    engine=engine,
                    host=host,
                    cause=entry["cause"],
                    message=entry["message"],
                    details=entry["details"],
                    started_at=started,
                )
                note_add(event, "pending", entry["message"], at=started)
            if event.state == AlertEvent.State.PENDING:
                event.state, event.fired_at = AlertEvent.State.FIRING, started
                if event.severity == "critical":
                    event.incident = Incident.objects.create(
                        opened_at=event.started_at,
                        engine=event.engine,
                        unit=getattr(event.engine, "unit", "") or "",
                        trigger=f"{event.rule}: {event.message}"[:2000],
                    )
                event.save(update_fields=["state", "fired_at", "incident"])
                note_add(event, "firing", f"{event.message} ({VIA})", at=started)
            if entry["sends"]:
                self._deliveries(event, entry, started)
            elif not entry["suppressed"] and not event.deliveries.filter(transition="firing").exists():
                # No channel was known when it fired (a worker started moments before the outage):
                # the outbox pages it now, through the channels the database names.
                notify(event=event, transition="firing")
            alert_changed(event)
        if entry["resolved"]:
            resolved = entry["resolved"]
            alert_observe(
                rule=entry["rule"],
                finding=Finding(
                    subject=entry["subject"],
                    active=False,
                    engine=engine,
                    resolution=resolved["resolution"],
                    resolved_by=resolved["resolved_by"],
                ),
                severity=entry["severity"],
                now=max(_parse(resolved["at"]) or started, started),
            )
        log.warning("spool: %s for %s written with its start as seen (%s)", entry["rule"], entry["subject"], started)

    def _deliveries(self, event: AlertEvent, entry: dict, started: datetime) -> None:
        """ENTRY's sends as outbox rows under their keys: sent ones as sent (with the attempt),
        the others pending, for the outbox to send once."""
        now = db_now()
        channels = set(
            NotificationChannel.objects.filter(pk__in=[s["channel"] for s in entry["sends"]]).values_list(
                "pk", flat=True
            )
        )
        pending, last_sent = [], None
        for send in entry["sends"]:
            if send["channel"] not in channels or Delivery.objects.filter(idempotency_key=send["key"]).exists():
                continue
            sent_at = to_shared(_parse(send["sent_at"])) if send["sent_at"] else None
            status = "sent" if sent_at else ("failed" if send["permanent"] else "pending")
            delivery = Delivery.objects.create(
                event=event,
                channel_id=send["channel"],
                transition="firing",
                idempotency_key=send["key"],
                status=status,
                attempts=send["attempts"],
                next_attempt_at=now,
                created_at=started,
                sent_at=sent_at,
                last_error=send["error"],
                duration_ms=send["ms"],
                payload={**send["payload"], "id": event.pk},
            )
            if send["attempts"]:
                DeliveryAttempt.objects.create(
                    delivery=delivery,
                    at=sent_at or now,
                    ok=bool(sent_at),
                    permanent=send["permanent"],
                    error=send["error"],
                    duration_ms=send["ms"] or 0.0,
                )
            if status == "pending":
                pending.append(delivery.pk)
            if sent_at is not None:
                last_sent = max(last_sent or sent_at, sent_at)
        if entry["sends"]:
            names = ", ".join(s["name"] for s in entry["sends"])
            note_add(event, "notify", f"firing → {names} ({VIA})", at=last_sent or started)
        if last_sent is not None:
            AlertEvent.objects.filter(pk=event.pk).update(last_notified_at=last_sent)
        enqueue_on_commit(pending)


def seen_time(finding: Finding) -> datetime:
    """When FINDING's condition was seen, on this process's clock (now when it does not say)."""
    return finding.observed_at or datetime.now(UTC)


__all__ = ["Routing", "Spool", "seen_time", "spool_dir"]
