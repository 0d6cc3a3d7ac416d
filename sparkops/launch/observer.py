"""When to observe how each engine was launched, and the observation itself.

Each box's resident poller calls `Observer.tick` on a thread of its own (the launch duty), with
every metrics tick's unit states and compiler scan; it costs a time check, except every
OBSERVE_EVERY_S and at once when a unit's main process, start time or state, or an engine's
status moved (a restart, a stop, a unit brought up). Then, for the box's own engines:

1. read their units (`collectors.unitconfig.read_units`: one `systemctl show` and one
   `systemctl cat` per scope, the named units' states, the EnvironmentFiles) and take, for
   those that answer, the engine's own account as its collector last read it (each collector's
   `account_of`: vLLM `/v1/models`, `/version` and the `vllm:cache_config_info` labels;
   llama.cpp `/props`; SGLang `/get_server_info`), no request of its own (`launch.account`);
2. parse the effective ExecStart with the engine's argument model (`collectors.flags`), each
   flag credited to the file that set it (the fragment, the drop-in, or the EnvironmentFile of
   an `LLAMA_ARG_*`/`$VAR` it came through);
3. store a `ConfigSnapshot` when the canonical JSON hashes differently from the engine's last
   one (secrets — API keys, tokens, passwords — are stored as a hash of their value only;
   `launch.snapshot`);
4. write the difference into the change log as an *observed* `flag_change` entry by
   "SparkOps" (`--max-model-len: 131072 → 262144 (set in …/20-window.conf)`), with a link to
   the KV-pool ledger row of the same restart when there is one (`launch.changelog`).

An engine that is not up is snapshotted only once it has stayed so for a whole interval (its
unit may be the reason it never comes up); otherwise the snapshot waits for the engine to
answer, so one restart gives one snapshot with the flags and the account together. Engines no
unit runs are found and versioned by `launch.handrun`, every start is measured by
`launch.starts`, and drift from the change log is raised by `launch.drift`.

Here: the Observer (its cadence and what it remembers between ticks), the launch audit's count
after each observation, and `observe_now` for callers outside a poller."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sparkops.audit import run as audit
from sparkops.collectors import unitconfig

from .account import Accounts, fetch_account, run_account
from .handrun import observe_hand_run
from .snapshot import latest_snapshot, observe_engine
from .starts import StartTracker

if TYPE_CHECKING:
    from dashboard.models import ConfigSnapshot, Engine, Host

log = logging.getLogger(__name__)
OBSERVE_EVERY_S = 60.0
MIN_GAP_S = 5.0  # a flapping engine's every status change does not cost an observation each


class Observer:
    """What one poller remembers between observations (nothing is lost by forgetting it)."""

    def __init__(self, every_s: float = OBSERVE_EVERY_S) -> None:
        self.every_s = every_s
        self.at = float("-inf")
        self.signature: dict[int, tuple[Any, ...]] | None = None
        self.down_seen: set[int] = set()  # engines seen not up at the last observation
        self.starts = StartTracker()
        self.failing: dict[int, int] = {}  # engine pk -> its failing audit checks at the last observation
        self.applied: dict[int, int] = {}  # engine pk -> its fixes written but not yet in what runs
        # Engines up whose account the collector had not read since their process started: the
        # poller reads it at its next poll, and the next tick that has it observes again at once.
        self.accounts_wanted: set[int] = set()
        self._accounts_asked: set[int] = set()  # of those, handed to the poller since the observation

    def accounts_to_read(self) -> set[int]:
        """The engines whose account the poller should read again at its next poll: each once per
        observation (an engine that does not answer is not asked every tick)."""
        new = self.accounts_wanted - self._accounts_asked
        self._accounts_asked |= new
        return new

    def track(
        self,
        *,
        engines: Sequence[Engine],
        units: Mapping[str, Mapping[str, Any]],
        processes: Mapping[str, Any] | None = None,
    ) -> None:
        """Follow the engines' starts through one metrics tick's UNITS and PROCESSES."""
        try:
            self.starts.track(engines, units, processes or {})
        except Exception:
            log.exception("engine starts not tracked")

    def tick(
        self,
        *,
        engines: Sequence[Engine],
        units: Mapping[str, Mapping[str, Any]],
        processes: Mapping[str, Any] | None = None,
        host: Host | None = None,
        now: float | None = None,
        accounts: Accounts | None = None,
    ) -> list[ConfigSnapshot]:
        """Observe ENGINES when due (UNITS: this tick's `systemctl show` of their units;
        PROCESSES: its compiler scan, for telling cold starts from warm ones; ACCOUNTS: the
        poller's {engine pk: (when read, epoch s; the engine's account)})."""
        now = time.monotonic() if now is None else now
        self.track(engines=engines, units=units, processes=processes)
        signature = {
            e.pk: (
                e.status,
                *[(units.get(e.unit) or {}).get(k) for k in ("MainPID", "ExecMainStartTimestamp", "ActiveState")],
            )
            for e in engines
        }
        since = now - self.at
        arrived = accounts is not None and any(
            e.pk in self.accounts_wanted
            and run_account(accounts, e, (units.get(e.unit) or {}).get("ExecMainStartTimestamp")) is not None
            for e in engines
        )
        if not arrived and (since < MIN_GAP_S or (since < self.every_s and signature == self.signature)):
            return []
        self.at, self.signature = now, signature
        made = self.observe(engines, host=host, accounts=accounts)
        try:
            self.failing, self.applied = audit_counts(engines)
        except Exception:
            log.exception("launch audit not run")
        return made

    def observe(
        self, engines: Sequence[Engine], *, host: Host | None = None, accounts: Accounts | None = None
    ) -> list[ConfigSnapshot]:
        """Snapshot ENGINES' launch configurations (those whose unit or process says something
        new), and find the engines no unit runs on HOST (default: the engines' host). ACCOUNTS:
        as `tick`'s; None (a caller outside a poller): each engine up is asked for it now."""
        host = host or next((e.host for e in engines), None)
        self.accounts_wanted, self._accounts_asked = set(), set()

        def account_for(engine: Engine, unit_cfg: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
            if accounts is None:
                return fetch_account(engine)
            account = run_account(accounts, engine, (unit_cfg or {}).get("started_at"))
            if account is None:
                self.accounts_wanted.add(engine.pk)
            return account

        made = observe_hand_run(host, engines, account_for=account_for) if host is not None else []
        engines = [e for e in engines if e.retired_at is None and e.unit]
        configs = unitconfig.read_units(engines)
        for engine in engines:
            up = engine.status == "up"
            if not up and engine.pk not in self.down_seen:
                self.down_seen.add(engine.pk)
                continue  # it may be starting: the snapshot waits for its answer
            if up:
                self.down_seen.discard(engine.pk)
            unit_cfg = configs.get(engine.pk)
            if unit_cfg is not None and unit_cfg.get("error"):
                log.info("unit of %s not read: %s", engine.name, unit_cfg["error"])
                continue  # nothing to version, so its account is not asked either
            account = account_for(engine, unit_cfg) if up else None
            if up and account is None:
                continue  # one restart, one snapshot: with the account of the process that runs
            try:
                snap = observe_engine(engine, unit_cfg, account=account)
            except Exception:
                log.exception("launch configuration of %s not observed", engine.name)
                continue
            if snap is not None:
                made.append(snap)
        return made


def failing_counts(engines: Sequence[Engine]) -> dict[int, int]:
    """{engine pk: its failing launch-audit checks} over ENGINES (one box's): one audit."""
    return audit_counts(engines)[0]


def audit_counts(engines: Sequence[Engine]) -> tuple[dict[int, int], dict[int, int]]:
    """({engine pk: its failing checks}, {engine pk: its checks "applied", waiting for a restart})
    over ENGINES (one box's), from one audit: what each engine card's badges say."""
    engines = [e for e in engines if e.retired_at is None]
    results = audit.audit(engines)

    def count(status: str) -> dict[int, int]:
        return {e.pk: sum(r.status == status and audit.concerns(r, e) for r in results) for e in engines}

    return count("fail"), count("applied")


def observe_now(engine: Engine) -> ConfigSnapshot | None:
    """ENGINE's configuration snapshot as of now: its unit and account read this moment, a new
    snapshot stored when they hash differently. None when its unit cannot be read now or it has
    no unit (what runs is then not known, and an older snapshot would not say). For callers that
    must know what runs before they measure it (A/B experiments), outside the poller's cadence."""
    if not engine.unit:
        return None
    unit_cfg = unitconfig.read_units([engine]).get(engine.pk)
    if unit_cfg is None or unit_cfg.get("error"):
        return None
    observe_engine(engine, unit_cfg, account=fetch_account(engine) or None)
    return latest_snapshot(engine)
