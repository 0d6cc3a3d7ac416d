"""One real systemd user manager for the test session (harness.py), and `box`: the same engine
operations against it ("real") and against the simulator's systemd ("sim"), so a test run on both
finds where they differ.

Under pytest-xdist each worker starts its own manager the first time one of its tests asks
(0.2-0.3 s); managers are private (own dirs, own cgroup slice, own journal), so the workers' and
concurrent test runs' managers never share one. These tests mostly wait on the manager's own
clock (restarts, start limits, timeouts), so they are spread over the workers rather than run in
a row on one (they were one xdist_group: 58 tests on one worker)."""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from pathlib import Path

import httpx
import pytest
from django.conf import settings as django_settings

from simulator.supervisor import REPO_ROOT
from sparkops.ports import free_port
from tests.waiting import serves as _healthy  # the engine answers /health (test_controls, test_launch, test_observe)
from tests.waiting import wait_for

from .harness import UserManager, unavailable

WAIT_S = 60.0
DIRECTIVES = {  # the simulator's unit options (its engine spec) as unit file directives
    "restart_sec": "RestartSec",
    "start_limit_burst": "StartLimitBurst",
    "start_limit_interval": "StartLimitIntervalSec",
}  # generous: the machine's load average may be 8


@pytest.fixture(scope="session")
def user_manager(request):
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="sparkops-sdu-"))  # short: the private socket path is < 108 bytes
    manager = UserManager(root, tag=f"{os.getpid()}_{uuid.uuid4().hex[:6]}")
    try:
        manager.start()
    except RuntimeError as exc:
        pytest.skip(f"the real systemd user manager did not start: {exc}")
    line = f"real systemd user manager ({manager.slice}) up in {manager.started_in_s:.2f} s"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
    else:
        print(line, file=sys.stderr)
    yield manager
    manager.stop()


class RealBox:
    """Engines under units of the real user manager; the collectors pointed at it."""

    kind = "real"

    def __init__(self, manager: UserManager, settings, monkeypatch):
        self.m = manager
        for key, value in manager.env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
        settings.SPARKOPS_SYSTEMCTL = "systemctl"
        settings.SPARKOPS_JOURNALCTL = str(manager.journalctl_wrapper())
        settings.SPARKOPS_HOST_ROOT = "/"
        self.units: dict[str, str] = {}
        self.ports: dict[str, int] = {}
        self.files: list[Path] = []

    def engine_argv(self, name, **opts):
        argv = [sys.executable, "-m", "simulator.engine", "--kind", "vllm", "--name", name]
        argv += ["--port", str(self.ports[name])]
        for key, value in opts.items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        return " ".join(argv)

    def add(self, name, *, restart="on-failure", service="", unit_section="", start=True, unit_opts=None, **opts):
        unit = f"{name}-{uuid.uuid4().hex[:6]}.service"
        for key, value in (unit_opts or {}).items():
            directive = DIRECTIVES[key]
            (unit_section, service) = (
                (unit_section + f"{directive}={value}\n", service)
                if directive.startswith("StartLimit")
                else (unit_section, service + f"{directive}={value}\n")
            )
        self.units[name], self.ports[name] = unit, free_port()
        text = (
            f"[Unit]\nDescription=simulated engine {name}\n{unit_section}"
            f"[Service]\nWorkingDirectory={REPO_ROOT}\nEnvironment=PYTHONUNBUFFERED=1 PYTHONPATH={REPO_ROOT}\n"
            f"ExecStart={self.engine_argv(name, **opts)}\nRestart={restart}\n{service}"
        )
        self.files.append(self.m.write_unit(unit, text))
        self.m.systemctl("daemon-reload")
        if start:
            self.m.systemctl("start", "--no-block", unit)
            self.wait_ready(name)
        return unit

    def add_together(self, names, *, start=True, **opts):
        """Engines NAMES, each under its own unit, started at once (`start_together`)."""
        units = [self.add(name, start=False, **opts) for name in names]
        if start:
            self.start_together(names)
            for name in names:
                self.wait_ready(name)
        return units

    def start_together(self, names):
        """One `systemctl --user start` of the units of NAMES: the manager starts them in the same instant."""
        self.m.systemctl("start", "--no-block", *(self.units[n] for n in names))

    def unit(self, name):
        return self.units[name]

    def url(self, name):
        return f"http://127.0.0.1:{self.ports[name]}"

    def wait_ready(self, name, timeout=WAIT_S):
        assert wait_for(lambda: _healthy(self.url(name)), timeout=timeout), f"{name} never answered"

    def fault(self, name, kind):
        httpx.post(self.url(name) + "/_sim/fault", json={"kind": kind}, timeout=10)

    def show(self, name):
        return self.m.show(self.units[name])

    def dropin(self, name, file_name, text, *, reload=True):
        path = self.m.write_drop_in(self.units[name], file_name, text)
        self.files.append(path)
        if reload:
            self.m.systemctl("daemon-reload")
        return str(path)

    def fragment(self, name):
        return str(self.m.unit_dir / self.units[name])

    def helper(self, name, budget, *, extra="", service=""):
        """A drop-in replacing ExecStartPost= with the readiness helper (simulator/waitready.py)."""
        cmd = f"{sys.executable} -m simulator.waitready {self.ports[name]} {budget} {extra}".strip()
        return self.dropin(name, "60-ready.conf", f"[Service]\nExecStartPost=\nExecStartPost={cmd}\n{service}")

    def restart(self, name):
        self.m.systemctl("restart", "--no-block", self.units[name])

    def close(self):
        units = list(self.units.values())
        if units:
            self.m.systemctl("stop", *units, check=False)
            self.m.systemctl("reset-failed", *units, check=False)
        for path in reversed(self.files):
            path.unlink(missing_ok=True)
            if path.parent.name.endswith(".d") and not any(path.parent.iterdir()):
                path.parent.rmdir()
        self.m.systemctl("daemon-reload", check=False)


class SimBox:
    """The same engines under the simulator's systemd (one Simulation per engine)."""

    kind = "sim"

    def __init__(self, tmp_path, settings, monkeypatch):
        self.tmp, self.settings, self.monkeypatch = tmp_path, settings, monkeypatch
        self.sims: dict = {}

    def add(self, name, *, restart="on-failure", service="", unit_section="", start=True, unit_opts=None, **opts):
        from simulator.client import Simulation
        from tests.simbox import point_collectors_at

        assert not service and not unit_section, "the simulator takes unit options in its spec"
        opts = {**(unit_opts or {}), **opts}
        spec = ",".join([f"vllm:{name}", f"restart={restart}", *(f"{k}={v}" for k, v in opts.items())])
        sim = Simulation(
            engines=[spec], state_dir=self.tmp / f"sim-{name}", ready_timeout=WAIT_S, wait_ready=start
        ).__enter__()
        self.sims[name] = sim
        point_collectors_at(sim, self.settings, self.monkeypatch, gpu=False)
        if start:
            sim.wait_ready(name, timeout=WAIT_S)
        return sim.unit(name)

    def add_together(self, names, *, restart="on-failure", start=True, unit_opts=None, hand_run=(), **opts):
        """Engines NAMES under one simulated box (one Simulation: one systemd, one /proc), so the
        collectors read them together; started at once (`start_together`) once up and stopped.
        HAND_RUN: those of NAMES started by hand from a shell (no unit; the simulator's hand_run)."""
        from simulator.client import Simulation
        from tests.simbox import point_collectors_at

        opts = {**(unit_opts or {}), **opts}
        specs = [
            ",".join(
                [f"vllm:{name}", f"restart={restart}", *(f"{k}={v}" for k, v in opts.items())]
                + (["hand_run=1"] if name in hand_run else [])
            )
            for name in names
        ]
        sim = Simulation(
            engines=specs, state_dir=self.tmp / f"sim-{'-'.join(names)}", ready_timeout=WAIT_S, wait_ready=start
        ).__enter__()
        for name in names:
            self.sims[name] = sim
        point_collectors_at(sim, self.settings, self.monkeypatch, gpu=False)
        if start:
            for name in names:
                sim.wait_ready(name, timeout=WAIT_S)
        return [sim.unit(name) for name in names]

    def start_together(self, names):
        """The simulated units of NAMES started one right after the other (the control API, no waiting)."""
        for name in names:
            self.sims[name].restart(name)

    def unit(self, name):
        return self.sims[name].unit(name)

    def url(self, name):
        return self.sims[name].url(name)

    def wait_ready(self, name, timeout=WAIT_S):
        self.sims[name].wait_ready(name, timeout=timeout)

    def fault(self, name, kind):
        self.sims[name].fault(name, kind)

    def show(self, name):
        return self.sims[name].show(name)

    def dropin(self, name, file_name, text, *, reload=True):
        self.sims[name].dropin(name, file_name, text, reload=reload)
        return f"/etc/systemd/system/{self.unit(name)}.d/{file_name}"

    def fragment(self, name):
        return self.show(name)["FragmentPath"]

    def helper(self, name, budget, *, extra="", service=""):
        from simulator.units import HELPER

        port = self.url(name).rsplit(":", 1)[1]
        cmd = f"{HELPER} {port} {budget} {extra}".strip()
        return self.dropin(name, "60-ready.conf", f"[Service]\nExecStartPost=\nExecStartPost={cmd}\n{service}")

    def restart(self, name):
        self.sims[name].restart(name)

    def close(self):
        for sim in {id(s): s for s in self.sims.values()}.values():  # add_together: one for several
            sim.stop()


@pytest.fixture(params=["real", "sim"])
def box(request, tmp_path, settings, monkeypatch):
    if request.param == "real":
        made = RealBox(request.getfixturevalue("user_manager"), settings, monkeypatch)
    else:
        made = SimBox(tmp_path, settings, monkeypatch)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def real_box(user_manager, settings, monkeypatch):
    made = RealBox(user_manager, settings, monkeypatch)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def engine_of(db):
    """engine_of(box, name): the Engine row for BOX's engine NAME on this host, as a --user unit."""
    from dashboard.models import Engine, Host

    def make(box, name):
        host, _ = Host.objects.get_or_create(name=django_settings.SPARKOPS_HOST_NAME)
        return Engine.objects.create(
            name=name, kind="vllm", url=box.url(name), host=host, unit=box.unit(name), unit_scope="user", status="up"
        )

    return make
