"""Shared by bench/death_to_page.py and bench/real_systemd_page.py: the simulated vLLM engine as a
unit of a real systemd 252 user manager (tests/realsystemd/harness.py: own journald, private mount
namespace; needs root), which dies on demand the way vLLM dies after an EngineCore death (the CUDA
line in its journal, then exit 0) and stamps each exit's time; and the `sparkops up` stack
(`_alerts_stack.Stack`) set up to watch it as a `--user-unit` engine through the real
`systemctl --user` and journal."""

import os
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from _alerts_stack import PY, ROOT

from sparkops.redisproc import free_port
from tests.realsystemd.harness import UserManager, unavailable

# The engine's main process: the simulator's vLLM engine in this process; when it ends (the exit0
# fault), its exit time goes to EXITS as the last thing before the process ends (os._exit: no
# interpreter teardown after the stamp, which under load took up to 0.3 s and is not detection).
DYING = """import os, sys, time
sys.path.insert(0, {root!r})
from simulator.engine import main
code = main(sys.argv[2:])
sys.stdout.flush(); sys.stderr.flush()
with open(sys.argv[1], "a") as fh:
    fh.write(f"{{time.time():.6f}}\\n")
os._exit(code)
"""


def wait_for(predicate, timeout, what):
    """PREDICATE()'s first truthy answer, polled every 5 ms; the bench ends saying WHAT never came."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.005)
    raise SystemExit(f"no {what} within {timeout} s")


def healthy(url):
    try:
        return httpx.get(url + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


class DyingUnit:
    """NAME's engine as a Restart=on-failure user unit of a fresh real user manager."""

    def __init__(self, name):
        reason = unavailable()
        if reason:
            raise SystemExit(f"cannot run a real systemd user manager here: {reason}")
        self.root = Path(tempfile.mkdtemp(prefix=f"sdu-{name[:6]}-"))  # short: the manager's socket path
        self.manager = UserManager(self.root, tag=f"{name[:8]}_{os.getpid()}_{uuid.uuid4().hex[:6]}").start()
        print(f"real systemd user manager up in {self.manager.started_in_s:.2f} s", flush=True)
        self.name, self.unit = name, f"{name}-{uuid.uuid4().hex[:6]}.service"
        self.exits, self.port = self.root / "exits.log", free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, service_extra=""):
        """Write the unit (SERVICE_EXTRA: more [Service] lines), start it, wait until it serves."""
        script = self.root / "dying_engine.py"
        script.write_text(DYING.format(root=str(ROOT)))
        self.manager.write_unit(
            self.unit,
            f"[Unit]\nDescription=simulated vLLM engine {self.name}\n"
            f"[Service]\nWorkingDirectory={ROOT}\nEnvironment=PYTHONUNBUFFERED=1 PYTHONPATH={ROOT}\n"
            f"ExecStart={PY} {script} {self.exits} --kind vllm --name {self.name} --port {self.port} "
            f"--exit-delay 0.05\nRestart=on-failure\n{service_extra}",
        )
        self.manager.systemctl("daemon-reload")
        self.manager.systemctl("start", self.unit)
        wait_for(lambda: healthy(self.url), 60, "answer from the engine")

    def watched_by(self, stack, receiver, channel, **env):
        """STACK set up to watch this unit (the manager's systemctl and journal, ENV added) and page
        RECEIVER through webhook CHANNEL; `stack.start_up()` is the caller's."""
        stack.env.update(
            self.manager.env,
            SPARKOPS_SYSTEMCTL="systemctl",
            SPARKOPS_JOURNALCTL=str(self.manager.journalctl_wrapper()),
            **env,
        )
        stack.env.pop("DBUS_SESSION_BUS_ADDRESS", None)
        stack.run("migrate", "-v", "0")
        stack.run("engine", "add", self.name, "--kind", "vllm", "--url", self.url, "--unit", self.unit, "--user-unit")
        stack.run("channel", "add", channel, "--webhook", receiver.url, "--secret", "bench-secret")

    def die(self, n):
        """The Nth death (0-based): the exit0 fault; the exit's time (time.time()) once stamped."""
        httpx.post(self.url + "/_sim/fault", json={"kind": "exit0"}, timeout=10)
        wait_for(lambda: self.exits.exists() and len(self.exits.read_text().split()) > n, 60, f"exit {n + 1}")
        return self.exit_times()[n]

    def exit_times(self):
        return [float(x) for x in self.exits.read_text().split()] if self.exits.exists() else []

    def restart(self):
        """Once systemd has let the unit go (exit 0 under on-failure: inactive), start it and wait until it serves."""
        wait_for(lambda: self.manager.show(self.unit).get("ActiveState") == "inactive", 60, "inactive unit")
        self.manager.systemctl("start", self.unit)
        wait_for(lambda: healthy(self.url), 60, "answer after the start")

    def stop(self):
        self.manager.stop()


class HandRun:
    """NAME's engine run by hand, with no unit: a process of this bench's own on a loopback port,
    added to SparkOps with only its URL. The worker watches the process that owns the port (a
    pidfd, looked for again when it changes); it dies and stamps its exit as DyingUnit's does."""

    def __init__(self, name):
        self.root = Path(tempfile.mkdtemp(prefix=f"hr-{name[:6]}-"))
        self.name, self.unit = name, ""
        self.exits, self.port = self.root / "exits.log", free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def start(self):
        (self.root / "dying_engine.py").write_text(DYING.format(root=str(ROOT)))
        self.restart()

    def watched_by(self, stack, receiver, channel, **env):
        stack.env.update(**env)
        stack.run("migrate", "-v", "0")
        stack.run("engine", "add", self.name, "--kind", "vllm", "--url", self.url)
        stack.run("channel", "add", channel, "--webhook", receiver.url, "--secret", "bench-secret")

    die = DyingUnit.die
    exit_times = DyingUnit.exit_times

    def restart(self):
        """A new process on the same port (the last one has exited), once it serves."""
        import subprocess

        if self.proc is not None:
            self.proc.wait(30)
        argv = [PY, str(self.root / "dying_engine.py"), str(self.exits), "--kind", "vllm", "--name", self.name]
        argv += ["--port", str(self.port), "--exit-delay", "0.05"]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: healthy(self.url), 60, "answer from the hand-run engine")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


class Load:
    """N busy processes (a pure-Python loop each) for the run's length: on 2 cores, 8 of them hold
    the load average near 8 + what the stack itself runs, the suite's own standard."""

    def __init__(self, n):
        import subprocess

        self.procs = [
            subprocess.Popen([PY, "-c", "while True: pass"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(n)
        ]

    def stop(self):
        for proc in self.procs:
            proc.kill()
            proc.wait(30)


def wait_stack(stack):
    """Until the stack's /healthz says ok (a poll done, the worker reporting)."""
    web = f"http://127.0.0.1:{stack.web_port}/healthz"

    def ok():
        try:
            return httpx.get(web, timeout=2).json().get("status") == "ok"
        except (httpx.HTTPError, ValueError):
            return False

    wait_for(ok, 180, "healthy stack (/healthz: a poll done, the worker reporting)")
