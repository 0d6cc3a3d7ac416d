"""The planner's read side: ledger rows as model.Rows, the box's memory from the poller's host
reading, and the models of a box's engines."""

from django.utils import timezone

from dashboard.changelog.grammar import format_when
from dashboard.models import Engine, Host, KVPoolEntry
from dashboard.models.ledgers import GIB

from .box import box_use
from .model import Row, learn
from .models import BoxSetting


def rows_of(queryset):
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


def used_bytes(reading):
    """The host's used memory, one definition everywhere (the host card, its chart, the planner):
    MemTotal − MemAvailable; the collector's mem_used_bytes is the same figure."""
    total, avail = reading.get("mem_total_bytes"), reading.get("mem_available_bytes")
    if total is not None and avail is not None:
        return total - avail
    return reading.get("mem_used_bytes")


def box_of(host):
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
    }


def engine_model(engine, box_gib=None, all_rows=None):
    if all_rows is None:
        all_rows = rows_of(KVPoolEntry.objects.all())
    if box_gib is None:
        box_gib = box_of(engine.host)["memory_gib"]
    return learn(engine.name, [r for r in all_rows if r.engine == engine.name], box_gib=box_gib, all_rows=all_rows)


def host_engines(host):
    """The box's watched engines that the ledger knows. A retired one is not planned for
    (nothing runs on it); its rows stay in the ledger and still inform the other engines' models."""
    with_rows = set(KVPoolEntry.objects.filter(engine__host=host).values_list("engine_id", flat=True))
    engines = Engine.objects.filter(host=host, retired_at__isnull=True).order_by("name")
    return [e for e in engines if e.pk in with_rows]


def host_plan(host):
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
        box_use(memory_gib=box["memory_gib"], other_gib=other, headroom_gib=box["headroom_gib"], shares=held)
        if box["memory_gib"]
        else None
    )
    box["computed_at"] = timezone.now().isoformat()
    return {"box": box, "models": models, "engines": engines, "held": held}


def _retired(engines, name):
    return any(e.name == name and e.is_retired for e in engines)


def host_by_name(name):
    return Host.objects.filter(name=name).first()
