"""A fleet of N boxes × 3 engines in the database, as their workers would have left it: the Hosts
grid's tests and bench/fleet_overview.py seed it. No worker runs: the rows say what each box
last reported and what each engine was last read as."""

from datetime import timedelta

from django.utils import timezone

from dashboard.clock import report_limit
from dashboard.models import Engine, Host
from sparkops.alerts.rules.host import stale_limit

KINDS = (("vllm-a", "vllm"), ("vllm-b", "vllm"), ("llama", "llamacpp"))
# The problems a seeded fleet of 50 has, by box number: what the tests assert on.
UNREACHABLE = (3, 17)
STALE = (8,)
SKEWED = (22,)
DOWN = {30: "vllm-b"}
LOADING = {41: "llama"}


def box_name(n: int) -> str:
    return f"box-{n:02d}"


def seed_fleet(boxes: int = 50, *, problems: bool = True) -> dict[str, list]:
    """BOXES hosts box-01… with 3 engines each (box-01-vllm-a, -vllm-b, -llama), all reporting and up;
    with PROBLEMS, those the module names. Returns {"hosts": [...], "engines": [...]}."""
    now = timezone.now()
    late = (report_limit(1) + stale_limit()) / 2  # past a store, not yet collector_stale's limit
    hosts, engines = [], []
    for n in range(1, boxes + 1):
        age, offset = timedelta(seconds=1), 0.01
        if problems and n in UNREACHABLE:
            age = stale_limit() + timedelta(minutes=2)
        elif problems and n in STALE:
            age = late
        elif problems and n in SKEWED:
            offset = 9.5
        reported = now - age
        host = Host.objects.create(name=box_name(n), last_report_at=reported, latest={"clock_offset_s": offset})
        hosts.append(host)
        for suffix, kind in KINDS:
            status = "up"
            if problems and DOWN.get(n) == suffix:
                status = "down"
            elif problems and LOADING.get(n) == suffix:
                status = "loading"
            engines.append(
                Engine(
                    name=f"{host.name}-{suffix}",
                    kind=kind,
                    url=f"http://10.0.{n}.1:{8000 + len(engines) % 3}",
                    host=host,
                    status=status,
                    status_reason="connection refused" if status == "down" else "",
                    last_poll_at=reported,
                )
            )
    Engine.objects.bulk_create(engines)
    return {"hosts": hosts, "engines": list(Engine.objects.filter(host__in=hosts).order_by("name"))}
