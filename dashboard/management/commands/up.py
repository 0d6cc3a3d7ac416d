"""`sparkops up`: the whole stack in the foreground (migrations, ASGI, worker, beat, Redis,
and with --demo the simulated engines). Ctrl-C stops every child; a child that dies is
reported and brings the stack down with a non-zero status rather than limping on.

One `up` per var dir: it holds an flock on VAR_DIR/up.lock for its whole life (the kernel
lets go of it when the process ends, even by SIGKILL, and its children die with it), and a
second `up` beside it refuses to start, naming the pid that holds it. While it runs,
VAR_DIR/stack.json names the Redis (its private one included), database and key prefix it gave
its children, so a command run from another shell reaches the same install (sparkops/install.py)."""

import fcntl
import json
import os
import secrets
import signal
import sys
import time
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from dashboard.engine_lifecycle import host_get_or_create
from dashboard.models import Engine
from dashboard.roles import set_role
from dashboard.stack.children import WEB_GRACE_S, Child, Supervisor
from sparkops.alerts.inbox import demo_inbox_channel
from sparkops.controls.runtime import RuntimeHeld, runtime_check
from sparkops.env import env_str
from sparkops.install import RECORDED, stack_forget, stack_record
from sparkops.probes.models import ProbeProfile
from sparkops.probes.schedule import probe_set_schedule
from sparkops.redisproc import PrivateRedis
from sparkops.staticstore import collect_unless_current
from sparkops.webproc import web_argv


class Command(BaseCommand):
    help = "Run the whole SparkOps stack in the foreground (Ctrl-C stops it)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--port", type=int, default=8000, help="web port (default 8000)")
        parser.add_argument("--bind", default="127.0.0.1", help="web address (default 127.0.0.1)")
        parser.add_argument("--demo", action="store_true", help=f"also run {_demo_engines()} and watch them")
        parser.add_argument("--no-beat", action="store_true", help="do not run Celery beat (another box runs it)")

    def handle(self, *args: Any, port, bind, demo, no_beat, **opts: Any):
        if not 0 < port < 65536:
            raise CommandError(f"--port {port} is not a TCP port")
        lock = _hold_var_dir_lock(Path(settings.VAR_DIR))
        try:
            _runtime_dir_free()
            return self._up(port=port, bind=bind, demo=demo, no_beat=no_beat)
        finally:
            lock.close()

    def _up(self, *, port, bind, demo, no_beat):
        call_command("migrate", interactive=False, verbosity=0)
        if collect_unless_current():  # the web server reads STATIC_ROOT once, when it starts
            self.stdout.write(f"collected static files (hashed, compressed) in {settings.STATIC_ROOT}\n")
        self._ensure_admin()
        redis = None if settings.REDIS_URL else PrivateRedis()
        try:
            redis_url = settings.REDIS_URL if redis is None else redis.start()
        except RuntimeError as exc:
            raise CommandError(str(exc)) from None
        sup = Supervisor(out=self.stdout)
        signal.signal(signal.SIGINT, sup.request_stop)
        signal.signal(signal.SIGTERM, sup.request_stop)
        var = Path(settings.VAR_DIR)
        # A command from another shell reads this to reach the same Redis, database and key prefix.
        given = {name: env_str(name) for name in RECORDED}
        stack_record(var, {**given, "REDIS_URL": redis_url}, pid=os.getpid())
        try:
            return self._run(sup, redis_url, port=port, bind=bind, demo=demo, beat=not no_beat)
        finally:
            sup.stop_all()
            stack_forget(var, pid=os.getpid())
            if redis:
                redis.stop(timeout=1.0)
                self.stdout.write("stopped redis-server\n")

    def _run(self, sup, redis_url, *, port, bind, demo, beat):
        env = {
            **os.environ,
            "REDIS_URL": redis_url,
            "DJANGO_SETTINGS_MODULE": "sparkops.settings",
            "SITE_URL": os.environ.get("SITE_URL", f"http://{bind}:{port}"),
        }
        if demo:
            env.update(self._start_demo(sup, env))
            self._demo_channel(bind, port)
        py = sys.executable
        sup.start(
            Child("web", web_argv(bind, port, "--timeout-graceful-shutdown", str(WEB_GRACE_S))),
            env,
        )
        sup.start(
            Child(
                "worker",
                [py, "-m", "sparkops.cli", "worker", "--host", settings.SPARKOPS_HOST_NAME, "--loglevel", "WARNING"],
            ),
            env,
        )
        if beat:
            sup.start(
                Child(
                    "beat",
                    [py, "-m", "celery", "-A", "sparkops", "beat", "--loglevel", "WARNING", "--pidfile="],
                    restart=True,  # it exits when the database is away for minutes; the worker pages on
                ),
                env,
            )
        self.stdout.write(f"SparkOps is up: http://{bind}:{port}/  (Ctrl-C stops it)\n")
        self.stdout.flush()
        dead = sup.watch()
        if dead is not None:
            raise CommandError(f"{dead.name} (pid {dead.pid}) exited with status {dead.returncode}; stopping the stack")

    def _demo_channel(self, bind, port) -> None:
        """The demo's local channel: a signed webhook to this stack's own inbox page."""
        host = "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind
        base = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
        channel, created = demo_inbox_channel(base_url=base)
        verb = "added" if created else "kept"
        self.stdout.write(f"demo channel {channel.name} ({verb}): every notification lands on {base}/alerts/inbox/\n")

    def _start_demo(self, sup, env):
        """Start the simulated engines, register them, and point the host collectors at the
        simulator's systemctl/journalctl/nvidia-smi work-alikes and PSI files."""
        demo_dir = Path(settings.VAR_DIR) / "demo"
        state_dir, ports_file = demo_dir / "state", demo_dir / "engines.json"
        demo_dir.mkdir(parents=True, exist_ok=True)
        ports_file.unlink(missing_ok=True)
        simulator = sup.start(
            Child(
                "simulator",
                [
                    sys.executable,
                    "-m",
                    "sparkops.cli",
                    "simulate",
                    "--state-dir",
                    str(state_dir),
                    "--ports-file",
                    str(ports_file),
                ],
            ),
            env,
        )
        engines = _wait_for_ports(ports_file, simulator)
        from simulator import cli as simulator_cli  # the demo's own door into the simulator (.importlinter)

        sim_bin = Path(simulator_cli.__file__).resolve().parent / "bin"  # its systemctl, journalctl, nvidia-smi
        for spec in engines:
            if spec.get("hand_run"):  # outside any unit: the worker finds it by itself (hand-run-PORT)
                self.stdout.write(f"demo hand-run engine ({spec['kind']}, no unit) at {spec['url']}\n")
                continue
            engine = _register_demo_engine(spec)
            self.stdout.write(f"demo engine {spec['name']} ({spec['kind']}) at {spec['url']}\n")
            if spec["kind"] == "vllm" and _seed_demo_probe(engine):
                self.stdout.write(f"demo probe {DEMO_PROBE['name']} on {engine.name}, hourly ({DEMO_PROBE_CRON})\n")
        return {
            "SPARKOPS_SIM_STATE_DIR": str(state_dir),
            "SPARKOPS_SYSTEMCTL": str(sim_bin / "sim-systemctl"),
            "SPARKOPS_JOURNALCTL": str(sim_bin / "sim-journalctl"),
            "SPARKOPS_NVIDIA_SMI": str(sim_bin / "sim-nvidia-smi"),
            "SPARKOPS_GPU_BACKEND": "nvidia-smi",
            "SPARKOPS_PROC_ROOT": str(state_dir / "proc"),
            "SPARKOPS_HOST_ROOT": str(state_dir / "root"),
            # the demo's units are the simulator's files: its worker may restart them and write the audit's
            # drop-ins (the Restart button, "Unit fix"), unless the operator said otherwise
            "SPARKOPS_UNIT_ACTIONS": os.environ.get("SPARKOPS_UNIT_ACTIONS", "1"),
        }

    def _ensure_admin(self) -> None:
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            return
        if User.objects.filter(username="admin").exists():
            self.stdout.write(
                "no admin yet, and the name 'admin' is taken: add one with `sparkops user add NAME --role admin`\n"
            )
            return
        given = os.environ.get("SPARKOPS_ADMIN_PASSWORD")
        password = given or secrets.token_urlsafe(12)
        user = User.objects.create_user(username="admin", password=password)
        set_role(user, "admin")
        shown = "(from SPARKOPS_ADMIN_PASSWORD)" if given else password
        self.stdout.write(f"created the admin user: admin / {shown}  — shown once; change it after logging in\n")


NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _demo_engines() -> str:
    """What --demo runs, counted from the simulator's own list (its help never drifts from it again)."""
    from simulator.cli import DEFAULT_ENGINES

    names = [spec.split(",")[0].split(":")[1] for spec in DEFAULT_ENGINES]
    count = NUMBERS[len(names)] if len(names) < len(NUMBERS) else str(len(names))
    return f"{count} simulated engines ({', '.join(names)})"


def _hold_var_dir_lock(var_dir):
    """Take VAR_DIR/up.lock for the life of this process, or refuse: another `up` of this
    install is running. The file names the holder's pid."""
    var_dir.mkdir(parents=True, exist_ok=True)
    path = var_dir / "up.lock"
    handle = open(path, "a+")  # noqa: SIM115 (held for the lock's life); not inherited by the children (Python opens fds close-on-exec)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise CommandError(
            f"another `sparkops up` (pid {holder}) is already running with this var dir ({var_dir}); "
            "stop it first, or give this one its own SPARKOPS_VAR_DIR"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def _runtime_dir_free():
    """Refuse, before anything starts, a runtime directory another install's live worker holds
    (issue 47 item 3: `up` said "SparkOps is up", then stopped when its worker child was refused)."""
    try:
        runtime_check(
            runtime_dir=settings.SPARKOPS_RUNTIME_DIR,
            stop_socket=settings.SPARKOPS_STOP_SOCKET,
            var_dir=settings.VAR_DIR,
        )
    except RuntimeHeld as exc:
        raise CommandError(f"refused: {exc}") from None


def _wait_for_ports(ports_file, simulator, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if simulator.exited():
            raise CommandError(f"the simulator exited with status {simulator.returncode}")
        if ports_file.exists():
            lines = [line for line in ports_file.read_text().splitlines() if line.strip()]
            try:
                engines = [json.loads(line) for line in lines]
            except json.JSONDecodeError:
                engines = []
            if len(engines) >= 2:
                return engines
        time.sleep(0.1)
    raise CommandError(f"the simulated engines did not start within {timeout:.0f} s")


def _register_demo_engine(spec):

    engine, _ = Engine.objects.update_or_create(
        name=spec["name"],
        defaults={
            "kind": spec["kind"],
            "url": spec["url"],
            "unit": spec.get("unit", ""),
            "host": host_get_or_create(),
            "retired_at": None,
            "expected_up": True,
        },
    )  # watched again if retired
    return engine


# A small needle probe on the demo's vLLM engine, so the Probes page has a result after its first (hourly) run:
# nine 1,500-token requests to a simulated engine an hour, nothing the 2-core box notices.
DEMO_PROBE = {"name": "demo-needle", "kind": "needle", "tokens": 1500, "depths": "10,50,90", "decoys": 2, "reps": 3}
DEMO_PROBE_CRON = "0 * * * *"


def _seed_demo_probe(engine):
    """Create the demo's needle probe once, scheduled hourly; True when created. An existing one (edited,
    unscheduled, moved by the operator) is left as it is, so a restarted demo changes nothing."""

    fields = {k: v for k, v in DEMO_PROBE.items() if k != "name"}
    profile, created = ProbeProfile.objects.get_or_create(
        name=DEMO_PROBE["name"], defaults={"engine": engine, **fields}
    )
    if created:
        probe_set_schedule(profile=profile, cron=DEMO_PROBE_CRON, enabled=True)
    return created
