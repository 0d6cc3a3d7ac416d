"""The engine's own account of itself (what it says it runs): read now through its collector, or
taken from what the poller last read when that read belongs to the running process."""

from __future__ import annotations

import asyncio
import logging

from dashboard import http
from dashboard.collectors import collector_for

from .starts import parse_timestamp

log = logging.getLogger(__name__)
ACCOUNT_TIMEOUT_S = 1.0  # outside a poller, the account is read with this timeout (its requests at once)


def run_account(accounts, engine, started):
    """ENGINE's account in ACCOUNTS ({pk: (when read, epoch s; account)}) when it was read since
    its process started (STARTED: systemd's ExecMainStartTimestamp; none known: any), else None:
    one read before a restart is the previous process's."""
    read_at, account = accounts.get(engine.pk, (None, None))
    began = parse_timestamp(started or "")
    if read_at is None or (began is not None and read_at < began.timestamp()):
        return None
    return account


def fetch_account(engine):
    """What the engine says about itself, read now through its collector (every endpoint at
    once, ACCOUNT_TIMEOUT_S each; a llama.cpp server's in turn, ACCOUNT_TIMEOUT_S in all): for
    callers outside a poller (`sparkops audit`, an A/B run that must know what runs). {} when it
    does not answer, so a hung engine costs one timeout."""
    coll = collector_for(engine.kind)

    async def fetch():
        async with http.async_client(headers=http.POLL_HEADERS) as client:
            return await coll.fetch(client, engine.base_url, timeout=ACCOUNT_TIMEOUT_S, refresh=True)

    snap = coll.snapshot(asyncio.run(fetch()))
    if snap.account is None:
        log.info("%s did not give its account: %s", engine.name, snap.error or snap.status)
    return snap.account or {}
