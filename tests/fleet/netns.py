"""A fleet on one machine (issue 48 item 1): N boxes, each a network namespace with its own
address, running a real `sparkops worker --host boxN` and its simulated engines, reaching one
PostgreSQL and one Redis over its veth link, as a box reaches the centre over its network.

    with FleetNet(4, database=settings_dict, redis_url=url, prefix=p, work=tmp) as net:
        net.boxes[2].cut(); net.boxes[2].restore(); net.boxes[0].kill_worker()

The centre is a namespace of its own too (10.K.255.1 on its loopback): every box's link runs
from it, and it routes between the boxes (the leader polls an adopted box's engines). Nothing
changes in the machine's own namespace, whose links a browser watches (Chromium aborts its
loads on a new link or address: ERR_NETWORK_CHANGED). PostgreSQL, Redis and the webhook
receiver stay where they listen (127.0.0.1 here): socat carries each connection from a port on
the centre's address over a Unix socket (the filesystem is shared) to them, so a cut link cuts
every connection of that box and of no other. Box I is 10.K.I.2, the centre's side of its link
10.K.I.1. Root only (namespaces, links); every name carries K (from this process's id) so two
runs on one machine do not meet."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, urlsplit

ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(Path(sys.executable))
ENGINE_PORT = 8001  # each box's engines listen on 8001, 8002, …: their own address, their own ports

SERVE = """
import asyncio, json, sys
from simulator.fleet import serve_many

async def main():
    fleet = await serve_many(int(sys.argv[2]), "vllm", name_prefix=sys.argv[3], host=sys.argv[1], load_seconds=0.0)
    print(json.dumps(fleet.urls), flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


POST = (
    "import sys, urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1], "
    "data=sys.argv[2].encode(), headers={'Content-Type': 'application/json'}), timeout=5).read()"
)


def why_not() -> str:
    """'' when this machine can run the harness, else the reason (for a skip)."""
    if os.geteuid() != 0:
        return "the fleet harness needs root (network namespaces and veth links)"
    for tool in ("ip", "socat"):
        if shutil.which(tool) is None:
            return f"the fleet harness needs {tool} (Debian: iproute2, socat)"
    probe = subprocess.run(["ip", "netns", "list"], check=False, capture_output=True, text=True)
    if probe.returncode != 0:
        return f"network namespaces unavailable here: {probe.stderr.strip()}"
    return ""


def sh(*argv: str) -> None:
    done = subprocess.run(argv, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


class Receiver:
    """Records every webhook POST (its JSON body and when it came), on the centre's address."""

    def __init__(self, address: str = "127.0.0.1"):
        self.bodies: list[dict] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.bodies.append({**json.loads(body or b"{}"), "_received_at": time.time()})
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((address, 0), Handler)
        self.url = f"http://{address}:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def pages(self) -> list[dict]:
        with self.lock:
            return list(self.bodies)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Box:
    """One box: its namespace, link, engines and worker."""

    def __init__(self, net: "FleetNet", index: int):
        self.net, self.index = net, index
        self.name = f"box{index:02d}"
        self.ns = f"sparkops{net.k}-{self.name}"
        self.outer, self.inner = f"vh{net.k}x{index}", f"vb{net.k}x{index}"
        self.gateway, self.address = f"10.{net.k}.{index}.1", f"10.{net.k}.{index}.2"
        self.engines_proc: subprocess.Popen | None = None
        self.worker: subprocess.Popen | None = None
        self.extra: list[subprocess.Popen] = []  # engines started beside the worker, one process each
        self.urls: list[str] = []
        self.log = net.work / f"{self.name}.log"

    def create(self) -> None:
        sh("ip", "netns", "add", self.ns)
        centre = ("ip", "netns", "exec", self.net.ns, "ip")
        sh(*centre, "link", "add", self.outer, "type", "veth", "peer", "name", self.inner, "netns", self.ns)
        sh(*centre, "addr", "add", f"{self.gateway}/24", "dev", self.outer)
        sh(*centre, "link", "set", self.outer, "up")
        inside = ("ip", "netns", "exec", self.ns, "ip")
        sh(*inside, "addr", "add", f"{self.address}/24", "dev", self.inner)
        sh(*inside, "link", "set", self.inner, "up")
        sh(*inside, "link", "set", "lo", "up")
        sh(*inside, "route", "add", "default", "via", self.gateway)

    def exec(self, *argv: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.ns, *argv], start_new_session=True, **kw)

    def start_engines(self, n: int) -> list[str]:
        self.engines_proc = self.exec(
            PYTHON, "-c", SERVE, self.address, str(n), self.name, cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        assert self.engines_proc.stdout is not None
        self.urls = json.loads(self.engines_proc.stdout.readline())
        return self.urls

    def start_worker(self) -> None:
        env = {**os.environ, **self.net.worker_env(self)}
        with open(self.log, "ab") as log:
            # Its own PID namespace and /proc: a box sees its own processes only (the launch
            # observation scans /proc for hand-run engines, and would find every other box's).
            self.worker = self.exec(
                "unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
                PYTHON, "-m", "sparkops.cli", "worker", "--host", self.name, "--loglevel", "WARNING",
                "--concurrency", "2", cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def kill_worker(self) -> None:
        """SIGKILL: a box that dies, without a word to anyone."""
        _kill(self.worker, signal.SIGKILL)
        self.worker = None

    def cut(self) -> None:
        """Pull the cable: the centre's side of the link goes down; the box sees its carrier
        lost, its packets go nowhere, and its connections hang as they would."""
        sh("ip", "netns", "exec", self.net.ns, "ip", "link", "set", self.outer, "down")

    def restore(self) -> None:
        centre = ("ip", "netns", "exec", self.net.ns, "ip")
        sh(*centre, "link", "set", self.outer, "up")
        # The route to the box goes with the link: back with it (the address stays).
        subprocess.run(
            [*centre, "route", "replace", f"10.{self.net.k}.{self.index}.0/24", "dev", self.outer], check=False
        )

    def slow(self, delay_ms: int) -> None:
        """tc netem on the link (where the kernel has it): every packet DELAY_MS late."""
        sh(
            "ip",
            "netns",
            "exec",
            self.net.ns,
            "tc",
            "qdisc",
            "replace",
            "dev",
            self.outer,
            "root",
            "netem",
            "delay",
            f"{delay_ms}ms",
        )

    def start_engine_beside_worker(self, name: str, port: int) -> subprocess.Popen:
        """One engine as its own process inside the worker's PID namespace, as on a real box: there
        the worker sees each engine's process and watches it through a pidfd on its port's owner.
        (The box's other engines share one process outside it, which saves 150 interpreters at 50
        boxes; the worker can only probe those.) Started after `start_worker`."""
        assert self.worker is not None, "the worker first: the engine joins its namespaces"
        inner = _first_child(self.worker.pid)  # unshare's child: PID 1 of the worker's namespace
        argv = ["nsenter", "-t", str(inner), "-p", "-m", "-n", PYTHON, "-m", "simulator.engine"]
        argv += ["--kind", "vllm", "--name", name, "--port", str(port), "--host", self.address]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.extra.append(proc)
        return proc

    def post(self, url: str, body: dict) -> None:
        """POST BODY (JSON) to URL from the centre (the boxes' addresses are not routed from here)."""
        sh("ip", "netns", "exec", self.net.ns, PYTHON, "-c", POST, url, json.dumps(body))

    def destroy(self) -> None:
        for proc in (self.worker, self.engines_proc, *self.extra):
            _kill(proc, signal.SIGTERM)
        subprocess.run(["ip", "netns", "del", self.ns], check=False, capture_output=True)  # its link goes with it


def _first_child(pid: int, timeout: float = 30.0) -> int:
    """PID's first child (from /proc/PID/task/PID/children), waited for up to TIMEOUT s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.05)
    raise AssertionError(f"process {pid} started no child in {timeout:.0f} s")


def _kill(proc: subprocess.Popen | None, sig: int) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)  # its own session: the process and what it started, nothing else
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


class FleetNet:
    """N boxes around one centre. DATABASE: the Django settings dict of the database the workers
    use (PostgreSQL); REDIS_URL: the Redis they use; PREFIX: SPARKOPS_CHANNEL_PREFIX; WORK: a
    directory for the boxes' logs and var dirs; ENV: more of the workers' environment."""

    def __init__(self, n: int, *, database: dict, redis_url: str, prefix: str, work: Path, env=None):
        self.k = 100 + os.getpid() % 150
        self.n, self.database, self.redis_url, self.prefix = n, database, redis_url, prefix
        self.work, self.env = Path(work), dict(env or {})
        self.centre = f"10.{self.k}.255.1"
        self.ns = f"sparkops{self.k}-centre"
        self.boxes = [Box(self, i) for i in range(n)]
        self.forwarders: list[subprocess.Popen] = []
        self.receiver: Receiver | None = None
        self.pg_port, self.redis_port, self.hook_port = 5432, 6379, 8080  # on the centre's address
        self.hook_url = f"http://{self.centre}:{self.hook_port}/hook"

    def __enter__(self) -> "FleetNet":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        centre = ("ip", "netns", "exec", self.ns)
        sh("ip", "netns", "add", self.ns)
        sh(*centre, "ip", "link", "set", "lo", "up")
        sh(*centre, "ip", "addr", "add", f"{self.centre}/32", "dev", "lo")
        sh(*centre, "sysctl", "-qw", "net.ipv4.ip_forward=1")  # this namespace's own
        redis = urlsplit(self.redis_url)
        self.receiver = Receiver()
        for port, target in (
            (self.pg_port, f"{self.database.get('HOST') or '127.0.0.1'}:{self.database.get('PORT') or 5432}"),
            (self.redis_port, f"{redis.hostname or '127.0.0.1'}:{redis.port or 6379}"),
            (self.hook_port, f"127.0.0.1:{self.receiver.server.server_address[1]}"),
        ):
            sock = self.work / f"centre-{port}.sock"
            # In the machine's namespace, to the service (one child per connection: the count of
            # a service's connections from the boxes)...
            self.forwarders.append(
                subprocess.Popen(
                    ["socat", f"UNIX-LISTEN:{sock},fork,mode=600", f"TCP:{target}"], start_new_session=True
                )
            )
            # ...and in the centre's, from its port to that.
            listen = f"TCP-LISTEN:{port},bind={self.centre},fork,reuseaddr"
            self.forwarders.append(
                subprocess.Popen([*centre, "socat", listen, f"UNIX-CONNECT:{sock}"], start_new_session=True)
            )
        for box in self.boxes:
            box.create()

    def worker_env(self, box: Box) -> dict[str, str]:
        db = self.database
        user = quote(db.get("USER") or "postgres")
        password = f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else ""
        redis = urlsplit(self.redis_url)
        var = self.work / box.name
        var.mkdir(exist_ok=True)
        return {
            "DATABASE_URL": f"postgres://{user}{password}@{self.centre}:{self.pg_port}/{db['NAME']}",
            "REDIS_URL": f"redis://{self.centre}:{self.redis_port}{redis.path or '/0'}",
            "SPARKOPS_CHANNEL_PREFIX": self.prefix,
            "SPARKOPS_HOST_NAME": box.name,
            "SPARKOPS_VAR_DIR": str(var),
            # Its own runtime dir, as a box has its own /run: the boxes share this machine's /tmp, and a
            # worker refuses a runtime dir another install's live worker holds (controls/runtime.py).
            "SPARKOPS_RUNTIME_DIR": str(var / "run"),
            "PGAPPNAME": f"sparkops-{box.name}",  # pg_stat_activity tells the boxes' connections apart
            "SECRET_KEY": "fleet-harness-not-secret-0123456789abcdef0123456789",
            "DJANGO_SETTINGS_MODULE": "sparkops.settings",
            **self.env,
        }

    def close(self) -> None:
        for box in self.boxes:
            box.destroy()
        for proc in self.forwarders:
            _kill(proc, signal.SIGTERM)
        if self.receiver is not None:
            self.receiver.close()
        subprocess.run(["ip", "netns", "del", self.ns], check=False, capture_output=True)

    def register(self, engines_per_box: int) -> None:
        """The fleet in the database, as an operator adds it: a webhook channel to the centre's
        receiver, each box's host, and ENGINES_PER_BOX simulated engines started on each box
        (named BOX-eN). The workers are the caller's to start."""
        from dashboard.models import Engine, Host
        from sparkops.alerts.models import NotificationChannel

        NotificationChannel.objects.create(
            name="hook", kind="webhook", config={"url": self.hook_url, "format": "sparkops"}
        )
        for box in self.boxes:
            host = Host.objects.create(name=box.name)
            for i, url in enumerate(box.start_engines(engines_per_box)):
                Engine.objects.create(name=f"{box.name}-e{i}", kind="vllm", url=url, host=host)

    def wait(self, predicate, timeout: float, what: str, step: float = 0.25):
        """PREDICATE's first truthy value within TIMEOUT s; else fail saying WHAT, with the boxes' logs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(step)
        tails = "\n".join(f"--- {b.name}\n{_tail(b.log)}" for b in self.boxes)
        raise AssertionError(f"{what}: not within {timeout:.0f} s\n{tails}")


def _tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"
