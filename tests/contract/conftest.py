import time

import pytest
import time_machine
from django.conf import settings as django_settings

from tests.simbox import point_collectors_at

WINDOW_S = 6.0  # long enough for a few polls on a busy 2-core box, short enough to wait out


@pytest.fixture
def sim(tmp_path, settings, monkeypatch):
    """A simulated vLLM (32k window) and llama.cpp under the simulated systemd, the collectors
    pointed at its systemctl/journalctl, and a short contract window so alerts clear in a test."""
    from simulator.client import Simulation
    from sparkops.collectors import hostread

    engines = ["vllm:ctr-vllm,max_model_len=32768", "llamacpp:ctr-llama,max_model_len=4096"]
    with Simulation(engines=engines, state_dir=tmp_path / "sim") as s:
        point_collectors_at(s, settings, monkeypatch, host_root=False)
        settings.SPARKOPS_CONTRACT_WINDOW_S = WINDOW_S
        settings.SPARKOPS_CONTRACT_CUT_WINDOW_S = WINDOW_S
        monkeypatch.setattr(hostread, "JOURNAL_EVERY_S", 0.0)  # read the journal on every poll here
        yield s


@pytest.fixture
def engines(sim, db):
    from dashboard.models import Engine, Host

    host = Host.objects.create(name=django_settings.SPARKOPS_HOST_NAME)
    made = {}
    for name, kind in (("ctr-vllm", "vllm"), ("ctr-llama", "llamacpp")):
        made[kind] = Engine.objects.create(
            name=name, kind=kind, url=sim.url(name), host=host, unit=sim.unit(name), status="up"
        )
    return made


_travels: list = []


def wait_out_window() -> None:
    """The contract's window passes: this process's clock (time.time, which stamps each reading the
    poller derives from, and SQLite's "now") moves WINDOW_S + 0.5 s on, instead of sleeping that long.
    The simulated engines keep their own clock: what they logged is now older than the window."""
    traveller = time_machine.travel(time.time() + WINDOW_S + 0.5, tick=True)
    traveller.start()
    _travels.append(traveller)


@pytest.fixture(autouse=True)
def _back_from_the_window():
    """Every clock a test moved (wait_out_window) is put back after it."""
    yield
    while _travels:
        _travels.pop().stop()
