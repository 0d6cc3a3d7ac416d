"""The planner's read side: ledger rows as model.Rows, the box's memory from the poller's host
reading, and the models of a box's engines."""

from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from dashboard.models import Engine, Host, KVPoolEntry
from dashboard.models.ledgers import GIB
from sparkops.changelog.grammar import format_when

from .box import box_use, fit, share_budget
from .engine_model import EngineModel, Row, learn
from .models import BoxSetting


def rows_of(queryset: QuerySet[KVPoolEntry]) -> list[Row]:
    return [
        Row(
            id=r.pk,
            date=format_when(r.recorded_at),
            order=r.recorded_at.timestamp() + r.pk * 1e-6,
            engine=r.engine.name,
            share=r.memory_share,
            kv_gib=r.kv_memory_bytes / GIB if r.kv_memory_bytes else None,
            pool_tokens=r.pool_tokens,
            window=r.window,
        )
        for r in queryset.select_related("engine").order_by("recorded_at", "id")
    ]


USED_NOW = "MemTotal − MemAvailable, the host card's “Memory used”"


def used_bytes(reading: dict[str, Any]) -> float | None:
    """The host's used memory, one definition everywhere (the host card, its chart, the planner):
    MemTotal − MemAvailable; the collector's mem_used_bytes is the same figure."""
    total, avail = reading.get("mem_total_bytes"), reading.get("mem_available_bytes")
    if total is not None and avail is not None:
        return total - avail
    return reading.get("mem_used_bytes")


def box_of(host: Host) -> dict[str, Any]:
    """The box: total memory (MemTotal from the poller's last host reading: on unified memory GPU
    allocations are system RAM, so it is the pool; else the planner's setting), used now (as the
    host card shows it), and the operator's headroom. memory_gib None: neither is known."""
    setting = BoxSetting.objects.filter(host=host).first()
    reading = (host.latest or {}).get("host") or {}
    total, used = reading.get("mem_total_bytes"), used_bytes(reading)
    memory = setting.memory_gib if setting and setting.memory_gib else (total / GIB if total else None)
    source = "planner setting" if setting and setting.memory_gib else ("MemTotal (poller)" if total else "unknown")
    return {
        "host": host.name,
        "memory_gib": memory,
        "memory_source": source,
        "used_now_gib": used / GIB if used else None,
        "used_now_means": USED_NOW,
        "reading_at": host.last_report_at.isoformat() if host.last_report_at else None,
        "headroom_gib": setting.headroom_gib if setting else 0.0,
        **share_limit_of(host),
    }


def share_limit_of(host: Host) -> dict[str, Any]:
    """The audit's limit on the sum of the engines' memory shares for HOST (memory_share_sum: 1 − its
    headroom, the box's stored threshold or the default), which every plan keeps to."""
    from sparkops.audit.thresholds import effective_thresholds

    headroom = effective_thresholds(host.pk)["memory_share_sum"]["headroom"]
    return {
        "share_limit": round(1 - headroom, 4),
        "share_limit_means": f"the audit's memory_share_sum: the shares sum to at most 1 − {headroom:g}",
    }


def engine_model(engine: Engine, box_gib: float | None = None, all_rows: list[Row] | None = None) -> EngineModel:
    if all_rows is None:
        all_rows = rows_of(KVPoolEntry.objects.all())
    if box_gib is None:
        box_gib = box_of(engine.host)["memory_gib"]
    return learn(engine.name, [r for r in all_rows if r.engine == engine.name], box_gib=box_gib, all_rows=all_rows)


def host_engines(host: Host) -> list[Engine]:
    """The box's watched engines that the ledger knows. A retired one is not planned for
    (nothing runs on it); its rows stay in the ledger and still inform the other engines' models."""
    with_rows = set(KVPoolEntry.objects.filter(engine__host=host).values_list("engine_id", flat=True))
    engines = Engine.objects.filter(host=host, retired_at__isnull=True).order_by("name")
    return [e for e in engines if e.pk in with_rows]


def host_plan(host: Host) -> dict[str, Any]:
    """Everything the planner page and `sparkops plan --host` need about HOST: the box and each
    engine's learned model, with what the engines hold now (their latest rows' shares)."""
    box = box_of(host)
    all_rows = rows_of(KVPoolEntry.objects.all())
    engines = host_engines(host)
    models = {e.name: engine_model(e, box["memory_gib"], all_rows) for e in engines}
    held = {n: m.current_share for n, m in models.items() if m.current_share and not _retired(engines, n)}
    other = 0.0
    box["shares_gib"] = sum(held.values()) * box["memory_gib"] if box["memory_gib"] else None
    if box["memory_gib"] and box["used_now_gib"] is not None:
        other = max(0.0, box["used_now_gib"] - box["shares_gib"])
    box["other_gib"] = other
    # engines without a share (llama.cpp): what they use is in the rest of the box, named there
    box["in_other"] = [n for n, m in models.items() if m.missing]
    box["now"] = (
        box_use(
            memory_gib=box["memory_gib"],
            other_gib=other,
            headroom_gib=box["headroom_gib"],
            shares=held,
            share_limit=box["share_limit"],
        )
        if box["memory_gib"]
        else None
    )
    box["budget_util"] = (
        round(share_budget(**{k: box[k] for k in ("memory_gib", "headroom_gib", "share_limit")}, other_gib=other), 4)
        if box["memory_gib"]
        else None
    )
    box["fit"] = fit(models, held=held, budget=box["budget_util"]) if box["memory_gib"] else None
    box["computed_at"] = timezone.now().isoformat()
    return {"box": box, "models": models, "engines": engines, "held": held}


def _retired(engines: list[Engine], name: str) -> bool:
    return any(e.name == name and e.is_retired for e in engines)


def host_by_name(name: str) -> Host | None:
    return Host.objects.filter(name=name).first()
