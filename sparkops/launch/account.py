"""The engine's own account of itself (what it says it runs): read now through its collector, or
taken from what the poller last read when that read belongs to the running process."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dashboard import http
from dashboard.systemctl_show import parse_timestamp
from sparkops.collectors import collector_for

if TYPE_CHECKING:
    from dashboard.models import Engine

# {engine pk: (when read, epoch s; the account, parsed JSON)}: what a poller last read
Accounts = Mapping[int, tuple[float, dict[str, Any]]]

log = logging.getLogger(__name__)
ACCOUNT_TIMEOUT_S = 1.0  # outside a poller, the account is read with this timeout (its requests at once)


def run_account(accounts: Accounts, engine: Engine, started: str | None) -> dict[str, Any] | None:
    """ENGINE's account in ACCOUNTS ({pk: (when read, epoch s; account)}) when it was read since
    its process started (STARTED: systemd's ExecMainStartTimestamp; none known: any), else None:
    one read before a restart is the previous process's."""
    read = accounts.get(engine.pk)
    if read is None:
        return None
    read_at, account = read
    began = parse_timestamp(started or "")
    if began is not None and read_at < began.timestamp():
        return None
    return account


def fetch_account(engine: Engine) -> dict[str, Any]:
    """What the engine says about itself, read now through its collector (every endpoint at
    once, ACCOUNT_TIMEOUT_S each; a llama.cpp server's in turn, ACCOUNT_TIMEOUT_S in all): for
    callers outside a poller (`sparkops audit`, an A/B run that must know what runs). {} when it
    does not answer, so a hung engine costs one timeout."""
    coll = collector_for(engine.kind)

    async def fetch() -> Any:
        async with http.async_client(headers=http.POLL_HEADERS) as client:
            return await coll.fetch(client, engine.base_url, timeout=ACCOUNT_TIMEOUT_S, refresh=True)

    snap = coll.snapshot(asyncio.run(fetch()))
    if snap.account is None:
        log.info("%s did not give its account: %s", engine.name, snap.error or snap.status)
    return snap.account or {}
