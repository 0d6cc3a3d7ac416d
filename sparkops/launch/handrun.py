"""Engines outside any unit: engine servers on a box that no watched unit runs, watched as
`hand-run-PORT` engines with snapshots of their argv and environment, and retired when their
process is gone."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from django.db import transaction

from dashboard.engine_lifecycle import engine_add, engine_retire
from dashboard.models import ConfigSnapshot, Engine, Host
from sparkops.collectors import handrun

from .account import fetch_account
from .snapshot import observe_engine

log = logging.getLogger(__name__)

HAND_RUN_PREFIX = "hand-run-"


def observe_hand_run(
    host: Host,
    engines: Sequence[Engine],
    *,
    account_for: Callable[[Engine], dict[str, Any] | None] | None = None,
) -> list[ConfigSnapshot]:
    """Engine servers on this box that no watched unit runs become engines of their own
    (`hand-run-PORT`, polled and on the overview like the rest) with a snapshot of their argv and
    environment (/proc/PID/environ: what a shell gave them); one whose process is gone is retired.
    ACCOUNT_FOR(engine): an engine's account, or None when not known (default: ask it now)."""

    found = handrun.scan(watched_units={e.unit for e in engines if e.unit})
    made: list[ConfigSnapshot] = []
    seen: set[str] = set()
    for proc in found:
        url = f"http://{proc['host']}:{proc['port']}"
        known = next((e for e in engines if _same_address(e.url, proc["host"], proc["port"])), None)
        if known is not None and known.unit:
            continue  # a watched unit's engine after all (its cgroup did not say so)
        name = known.name if known is not None else f"{HAND_RUN_PREFIX}{proc['port']}"
        seen.add(name)
        engine = known or Engine.objects.select_related("host").filter(name=name).first()
        if engine is None or engine.retired_at is not None:
            with transaction.atomic():
                engine, _ = engine_add(name=name, kind=proc["kind"], url=url, host=host.name)
            log.warning(
                "a hand-run %s engine (pid %s) serves %s outside any unit: watching it as %s",
                proc["kind"],
                proc["pid"],
                url,
                name,
            )
        pid = proc["pid"]
        cfg = {
            "environment": proc["environ"],
            "environment_origins": {k: f"/proc/{pid}/environ" for k in proc["environ"]},
            "exec_start": {
                "argv": proc["argv"],
                "origins": [f"/proc/{pid}/cmdline"] * len(proc["argv"]),
                "file": f"/proc/{pid}/cmdline",
            },
        }
        snap = observe_engine(
            engine,
            cfg,
            account=(account_for or fetch_account)(engine) if engine.status == "up" else None,
            launch="hand-run",
            process={"pid": pid, "cgroup": proc["cgroup"], "scope": proc["unit"]},
        )
        if snap is not None:
            made.append(snap)
    for engine in Engine.objects.filter(host=host, name__startswith=HAND_RUN_PREFIX, unit="", retired_at__isnull=True):
        if engine.name not in seen:
            with transaction.atomic():
                engine_retire(name=engine.name)
            log.info("hand-run engine %s is gone: retired (its history stays)", engine.name)
    return made


def _same_address(url: str, host: str, port: int) -> bool:
    parts = urlsplit(url)
    local = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
    same_host = parts.hostname == host or (parts.hostname in local and host in local)
    return same_host and (parts.port or (443 if parts.scheme == "https" else 80)) == port
