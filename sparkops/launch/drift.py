"""Drift: the change log's newest human-written flag lines, and the engine's own account, against
the flags that run; each disagreement fires a `config_drift` alert, each agreement resolves it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkops.changelog.models import FlagChange
from sparkops.collectors import flags as flagmodel

from .changelog import AUTHOR, OBSERVED_MARK, Data, _flags_of, _origin

if TYPE_CHECKING:
    from dashboard.models import Engine


def _norm(value: object) -> str:
    text = str(value).strip().replace(",", "").replace("_", "")
    return text.lower()


# kind -> [(flag, where in the account, what the engine calls it)]
ACCOUNT_FLAGS: dict[str, list[tuple[str, tuple[str, ...], str]]] = {
    "vllm": [
        ("--max-model-len", ("max_model_len",), "/v1/models max_model_len"),
        ("--kv-cache-dtype", ("cache_config", "cache_dtype"), "vllm:cache_config_info cache_dtype"),
        (
            "--gpu-memory-utilization",
            ("cache_config", "gpu_memory_utilization"),
            "vllm:cache_config_info gpu_memory_utilization",
        ),
        ("--block-size", ("cache_config", "block_size"), "vllm:cache_config_info block_size"),
    ],
    "sglang": [
        ("--context-length", ("context_length",), "/get_server_info context_length"),
        ("--mem-fraction-static", ("mem_fraction_static",), "/get_server_info mem_fraction_static"),
        ("--kv-cache-dtype", ("kv_cache_dtype",), "/get_server_info kv_cache_dtype"),
    ],
}


def _same(a: object, b: object) -> bool:
    try:
        return float(_norm(a)) == float(_norm(b))
    except ValueError:
        return _norm(a) == _norm(b)


def check_account_drift(engine: Engine, data: Data | None) -> None:
    """Fire `config_drift` where the engine's own account disagrees with its argv (a checkpoint
    that bakes `kv_cache_quant_algo: FP8` overrides `--kv-cache-dtype`; a window capped below
    `--max-model-len`); resolve where they agree."""
    from sparkops.alerts.services import external_alert_fire, external_alert_resolve

    running, account = _flags_of(data), (data or {}).get("account") or {}
    for flag, path, name in ACCOUNT_FLAGS.get(engine.kind, ()):
        said = account
        for key in path:
            said = said.get(key) if isinstance(said, dict) else None
        subject = f"{engine.name} account {flag}"
        if flag not in running or said in (None, "", "None"):
            continue
        if _same(flagmodel.render(running[flag]), said):
            external_alert_resolve(rule="config_drift", engine=engine, subject=subject)
            continue
        origin = _origin(data, flag)
        external_alert_fire(
            rule="config_drift",
            severity="warning",
            engine=engine,
            subject=subject,
            cause="engine account",
            message=(
                f"{flag}: the command line says {flagmodel.render(running[flag])} (set in "
                f"{origin or 'the unit'}) but {engine.name} reports {said} ({name})"
            ),
        )


def check_drift(engine: Engine, data: Data | None) -> None:
    """Fire `config_drift` for each flag whose newest human-written change-log line (an entry
    naming ENGINE, not written by SparkOps) disagrees with the running value; resolve the others.
    Then the engine's own account against its argv (`check_account_drift`)."""
    from sparkops.alerts.services import external_alert_fire, external_alert_resolve

    check_account_drift(engine, data)
    running = _flags_of(data)
    lines = (
        FlagChange.objects.filter(entry__engines=engine, flag__startswith="-")
        .exclude(entry__author__isnull=True, entry__author_name=AUTHOR)
        .exclude(entry__body_md__startswith=OBSERVED_MARK)
        .select_related("entry")
        .order_by("-entry__effective_at", "-entry_id", "-position")
    )
    newest: dict[str, FlagChange] = {}
    for line in lines:
        newest.setdefault(line.flag, line)
    for flag, line in newest.items():
        subject = f"{engine.name} {flag}"
        now_value = running.get(flag)
        if now_value is None or _same(line.new, flagmodel.render(now_value)):
            external_alert_resolve(rule="config_drift", engine=engine, subject=subject)
            continue
        origin = _origin(data, flag)
        external_alert_fire(
            rule="config_drift",
            severity="warning",
            engine=engine,
            subject=subject,
            cause=origin.rsplit("/", 1)[-1] if origin else "",
            message=(
                f"{flag}: the change log says {line.new} (entry {line.entry_id}, "
                f"{line.entry.effective_at:%Y-%m-%d %H:%M}) but {engine.name} runs "
                f"{flagmodel.render(now_value)}, set in {origin or 'the unit'}"
            ),
        )
