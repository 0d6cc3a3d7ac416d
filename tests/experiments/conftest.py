"""Experiment fixtures: the benchmarks' in-process simulated engines, and a simulated box whose two
vLLM units (systemd stand-in, drop-ins, a real engine behind each) serve at known rates."""

import pytest
from django.conf import settings as django_settings

from tests.benchmarks.conftest import host, loop_thread, make_engine, sim  # noqa: F401  (shared fixtures)
from tests.simbox import point_collectors_at


@pytest.fixture
def ab_box(tmp_path, settings, monkeypatch, db):
    """Units `arm-a` (50 tok/s) and `arm-b` (55 tok/s) on a simulated box, registered as engines."""
    from dashboard.models import Engine, Host
    from simulator.client import Simulation

    specs = ["vllm:arm-a,rate=50,ttft=0.01", "vllm:arm-b,rate=55,ttft=0.01"]
    with Simulation(engines=specs, state_dir=tmp_path / "sim") as s:
        point_collectors_at(s, settings, monkeypatch, gpu=False)
        box = Host.objects.create(name=django_settings.SPARKOPS_HOST_NAME)
        engines = {
            name: Engine.objects.create(
                name=name,
                kind="vllm",
                url=s.url(name),
                host=box,
                unit=s.unit(name),
                status="up",
                latest={"window": 32768},
            )
            for name in ("arm-a", "arm-b")
        }
        yield s, engines
