"""Liveness probes: one cheap request to each engine, and the Engine.status a finding moves.

The poller's probe duty runs `engines_probe` every liveness interval; the exit path
(`exits.py`) records the same `Liveness` finding when a watched process dies."""

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from dashboard import http
from dashboard.clock import to_shared
from dashboard.dbgate import GATE
from dashboard.models import Engine
from sparkops.collectors import collector_for, runner, unitnow
from sparkops.collectors.base import describe

RECHECK_DELAY_S = 0.3


def probe_timeout():
    return max(0.2, min(settings.SPARKOPS_LIVENESS_INTERVAL * 0.6, 2.0))


@dataclass
class Liveness:
    """One probe's finding about one engine. `changed`: Engine.status moved with it.
    `unit_now`: its unit read with the finding (an engine expected up found not up, or back up)."""

    engine: Engine
    status: str  # up | loading | down | unknown (its box is unreachable)
    reason: str
    rechecked: bool
    checked_at: datetime
    changed: bool = False
    unit_now: unitnow.UnitNow | None = None
    # When its box (another, whose engines this worker adopted) last reported: not answering is
    # then "unknown", not "down" (`poller/fleet.py`), and the engine_down rule pages nothing.
    box_unreachable_since: datetime | None = None

    @property
    def up(self):
        return self.status == "up"

    def as_dict(self):
        return {
            "engine": self.engine.name,
            "status": self.status,
            "up": self.up,
            "reason": self.reason,
            "rechecked": self.rechecked,
        }


def engines_probe(*, engines, keep_down=frozenset(), unreachable=None, fences=None) -> list[Liveness]:
    """Cheap liveness probe of every engine; a failed probe is re-checked ~0.3 s later.
    A status that moved is stored at once, except an "up" for an engine in KEEP_DOWN (ids of
    engines a metrics poll found down: a healthy /health does not overrule their /metrics).
    An engine expected up that is found not up, or up again, has its unit read with the finding
    (`collectors/unitnow`): the engine_down rule says from it why it died or who restarted it.
    UNREACHABLE ({host pk: its last report}): boxes whose worker stopped reporting, whose engines
    this worker adopted; one of theirs not answering is "unknown" (`box_unknown`). FENCES: {host
    pk: the fencing token its lease gave this worker} (`liveness_record`)."""
    engines = list(engines)
    if not engines:
        return []

    async def probe_all(client):
        return await asyncio.gather(*(_probe_twice(client, e) for e in engines))

    findings = [
        finding
        if finding.up and finding.engine.pk in keep_down
        else liveness_record(box_unknown(finding, unreachable), fence=(fences or {}).get(finding.engine.host_id))
        for finding in runner.run(probe_all)
    ]
    for finding in findings:
        if finding.engine.expected_up and (not finding.up or finding.changed):
            finding.unit_now = unitnow.unit_now(finding.engine)
    return findings


async def _probe_once(client, engine):
    coll = collector_for(engine.kind)
    try:
        resp = await http.aget(
            client,
            engine.base_url + coll.liveness_path,
            timeout=probe_timeout(),
            ok_statuses=coll.probe_ok_statuses,
            max_bytes=256 * 1024,
        )
    except http.HttpError as exc:
        return "down", f"{coll.liveness_path}: {describe(exc)}"
    if resp.status in coll.probe_ok_statuses:
        return "loading", f"{coll.liveness_path}: HTTP {resp.status} (loading)"
    return "up", ""


async def _probe_twice(client, engine):
    status, reason = await _probe_once(client, engine)
    rechecked = False
    if status == "down":  # one lost packet or a busy accept queue must not page anyone
        await asyncio.sleep(RECHECK_DELAY_S)
        status, reason = await _probe_once(client, engine)
        rechecked = True
    return Liveness(engine, status, reason, rechecked, timezone.now())


def box_unknown(finding: Liveness, unreachable) -> Liveness:
    """FINDING as "unknown" when the engine did not answer and its box is in UNREACHABLE ({host
    pk: last report}): from here a partition and a dead engine look the same."""
    since = (unreachable or {}).get(finding.engine.host_id)
    if since is not None and finding.status == "down":
        finding.box_unreachable_since = since
        finding.reason = f"{unreachable_text(finding.engine.host.name, since)} (here: {finding.reason})"
        finding.status = "unknown"
    return finding


def unreachable_text(box, since):
    """How an engine of an unreachable BOX (last report SINCE, an aware datetime) is explained."""
    return f"box {box} unreachable since {since.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC: its state is unknown"


def liveness_record(finding: Liveness, fence: int | None = None) -> Liveness:
    """Move Engine.status when FINDING changes it (a conditional UPDATE) and say so in `changed`.
    While the database is away (`dbgate`) the status moves here only, and the poller's next
    store writes it: the finding, and the page it raises, must not wait for the database.
    FENCE: this worker's fencing token for the engine's box (`lease.py`); the row is not moved
    when the box's stores carry a larger one (a poller that lost the box meanwhile)."""
    engine = finding.engine
    finding.changed = engine.status != finding.status
    if finding.changed:
        if not GATE.away():
            try:
                rows = Engine.objects.filter(pk=engine.pk)
                if fence is not None:
                    rows = rows.filter(host__fence__lte=fence)
                with transaction.atomic():
                    rows.update(
                        status=finding.status,
                        status_reason=finding.reason,
                        status_changed_at=to_shared(finding.checked_at),  # others read it: the database's clock
                    )
            except DatabaseError as exc:
                if not GATE.failed(exc):
                    raise
        engine.status, engine.status_reason, engine.status_changed_at = (
            finding.status,
            finding.reason,
            to_shared(finding.checked_at),
        )
    return finding
