"""The real stack: `sparkops up --demo` as a subprocess on free ports, logged into over HTTP."""

import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from dashboard.http import sync_client
from sparkops.ports import free_port

pytestmark = pytest.mark.stack
ADMIN_PASSWORD = "stack-test-admin-password"


def _wait_http(url, proc, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"sparkops up exited early with {proc.returncode}"
        try:
            if sync_client().get(url, timeout=1).status_code in (200, 503):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} did not answer within {timeout} s")


def _login(base):
    client = httpx.Client(base_url=base, timeout=5, follow_redirects=False)
    client.get("/login/")
    response = client.post(
        "/login/",
        data={"username": "admin", "password": ADMIN_PASSWORD, "csrfmiddlewaretoken": client.cookies["csrftoken"]},
        headers={"Referer": base + "/login/"},
    )
    assert response.status_code == 302 and response.headers["location"] == "/", response.text[:500]
    return client


def _polled_demo_engine(client, timeout, name=None):
    deadline = time.monotonic() + timeout
    engines = []
    while time.monotonic() < deadline:
        engines = client.get("/api/engines/").json()["engines"]
        polled = [
            e
            for e in engines
            if (e["name"] == name if name else e["name"].startswith("demo-"))
            and e["last_poll_at"]
            and e["status"] == "up"
        ]
        if polled:
            return polled[0]
        time.sleep(0.25)
    raise AssertionError(f"no demo engine polled up within {timeout} s: {engines}")


def _probe_finished(client, url, timeout):
    deadline = time.monotonic() + timeout
    progress = {}
    while time.monotonic() < deadline:
        progress = client.get(url, params={"format": "progress"}).json()
        if progress["status"] not in ("queued", "running"):
            return progress
        time.sleep(0.5)
    raise AssertionError(f"the probe run did not finish within {timeout} s: {progress}")


def _children(pid):
    """The process tree under PID, built from one process_iter pass (which skips processes
    that vanish mid-walk, unlike Process.children on a busy machine)."""
    by_parent = {}
    for process in psutil.process_iter(["ppid"]):
        by_parent.setdefault(process.info["ppid"], []).append(process)
    tree, todo = [], [pid]
    while todo:
        for child in by_parent.get(todo.pop(), []):
            tree.append(child)
            todo.append(child.pid)
    return tree


def _cmdline(process):
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # short-lived children (a collector's systemctl call) come and go
        return ""


def _alive(process):
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_up_demo_serves_polled_engines_and_stops_every_child(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL", "SPARKOPS_TEST_DB_NAME")}
    env.update(
        {
            "SPARKOPS_VAR_DIR": str(tmp_path),
            "SPARKOPS_ADMIN_PASSWORD": ADMIN_PASSWORD,
            "SPARKOPS_HOST_NAME": "stack-test",
        }
    )
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "up", "--demo", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_http(base + "/healthz", proc, timeout=90)
        client = _login(base)
        engine = _polled_demo_engine(client, timeout=10)
        assert engine["latest"]["up"] is True and engine["latest"]["models"]
        page = client.get("/")
        assert page.status_code == 200, page.text[-2000:]
        # The demo's needle probe is on the Probes page, hourly; the fresh start fires nothing.
        probes = client.get("/probes/")
        assert probes.status_code == 200 and "demo-needle" in probes.text and "0 * * * *" in probes.text
        firing = client.get("/live/alerts/")
        assert firing.status_code == 200 and "Nothing firing." in firing.text, firing.text[-2000:]
        # Its first run (pressed once demo-vllm is up, rather than at the hour: its first start is a cold one) goes
        # through the worker and reads HIT at each depth.
        _polled_demo_engine(client, timeout=60, name="demo-vllm")
        profile = re.search(r'href="/probes/profiles/(\d+)/">demo-needle<', probes.text).group(1)
        queued = client.post(
            f"/probes/profiles/{profile}/run/",
            data={"csrfmiddlewaretoken": client.cookies["csrftoken"]},
            headers={"Referer": base + "/probes/"},
        )
        assert queued.status_code == 302, queued.text[-2000:]
        progress = _probe_finished(client, queued.headers["location"], timeout=90)
        run_page = client.get(queued.headers["location"]).text
        reason = (re.search(r"<p class=\"reason\">(.*?)</p>", run_page) or [None, None])[1]
        assert progress["status"] == "done" and progress["done"] == progress["total"] == 9, (progress, reason)
        assert "HIT HIT HIT" in run_page, run_page[-3000:]
        firing = client.get("/live/alerts/")
        assert "Nothing firing." in firing.text, firing.text[-2000:]
        _demo_channel_delivers(client, base)
        _static_is_collected(client)
        _demo_unit_fix_applies(client, base)
        children = _children(proc.pid)
        names = " ".join(_cmdline(c) for c in children)
        for part in ("uvicorn", "worker", "beat", "simulate", "redis-server"):
            assert part in names, f"{part} is not running under sparkops up: {names}"
    except BaseException as exc:
        proc.send_signal(signal.SIGINT)
        raise AssertionError(f"{exc}\n--- sparkops up said:\n{proc.communicate(timeout=60)[0][-8000:]}") from exc
    # SIGTERM (what systemd and docker send; Ctrl-C's SIGINT takes the same path) stops it all: each child
    # on its own within the stack's grace (a child still running then is SIGKILLed and `up` says "killed").
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output[-3000:]
    alive = [_cmdline(c) for c in children if _alive(c)]
    assert not alive, f"still running after stop: {alive}"
    assert "stopped web" in output and "stopped redis-server" in output and "killed" not in output, output[-1500:]
    assert "demo probe demo-needle on demo-vllm, hourly (0 * * * *)" in output
    assert "demo channel demo-inbox (added): every notification lands on " + base + "/alerts/inbox/" in output
    assert "collected static files (hashed, compressed)" in output


def _demo_channel_delivers(client, base):
    """Issue 30 §5: the demo ships a channel to the stack's own inbox; its Test goes through the worker's outbox."""
    channel = re.search(r'action="/alerts/channels/(\d+)/test"', client.get("/alerts/channels/").text).group(1)
    sent = client.post(
        f"/alerts/channels/{channel}/test",
        data={"csrfmiddlewaretoken": client.cookies["csrftoken"]},
        headers={"Referer": base + "/alerts/channels/"},
    )
    assert sent.status_code == 302, sent.text[-2000:]
    deadline = time.monotonic() + 30
    while "Test notification from SparkOps to channel demo-inbox." not in (inbox := client.get("/alerts/inbox/").text):
        assert time.monotonic() < deadline, "the demo channel's test never reached the inbox: " + inbox[-2000:]
        time.sleep(0.2)


def _demo_unit_fix_applies(client, base):
    """Issue 27: the demo's engines run under Restart=on-failure; the audit's fix is previewed on the page
    and applied by the demo's worker (its SPARKOPS_UNIT_ACTIONS=1), which logs the observed change."""
    url = "/engines/demo-vllm/audit/fix/"
    deadline = time.monotonic() + 90  # the worker observes the units within its first minute
    while "+Restart=always" not in (page := client.get(url).text):
        assert time.monotonic() < deadline, "no restart fix previewed: " + page[-2000:]
        time.sleep(0.5)
    sent = client.post(
        url,
        data={"csrfmiddlewaretoken": client.cookies["csrftoken"], "check": "restart_always_bounded"},
        headers={"Referer": base + url},
    )
    assert sent.status_code == 302, sent.text[-2000:]
    deadline = time.monotonic() + 60
    while "wrote 50-sparkops-restart_always_bounded.conf" not in (page := client.get(url).text):
        assert time.monotonic() < deadline, "the demo's worker never applied the fix: " + page[-3000:]
        time.sleep(0.5)
    assert "the observed change" in page and "+Restart=always" not in page, page[-3000:]


def _static_is_collected(client):
    """Issue 30 §6: `up` collected the static files; a chart page names plotly.js hashed, sent compressed for good."""
    html = client.get("/engines/demo-vllm/").text
    plotly_js = re.search(r'src="(/static/vendor/plotly-basic-[0-9.]+\.min\.[0-9a-f]{12}\.js)"', html).group(1)
    answer = client.get(plotly_js, headers={"Accept-Encoding": "br"})
    assert answer.headers["content-encoding"] == "br" and "immutable" in answer.headers["cache-control"]


def test_sigkilled_up_leaves_no_child_and_a_second_up_is_refused(tmp_path):
    """The OOM killer's SIGKILL gives `up` no chance to stop anything: its children (and the
    simulator's engines) must go by themselves, freeing the port and the var dir's lock. While
    it lives, a second `up` on the same var dir refuses to start and names it."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL", "SPARKOPS_TEST_DB_NAME")}
    env.update(
        {
            "SPARKOPS_VAR_DIR": str(tmp_path),
            "SPARKOPS_ADMIN_PASSWORD": ADMIN_PASSWORD,
            "SPARKOPS_HOST_NAME": "stack-kill",
        }
    )
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "up", "--demo", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_http(f"http://127.0.0.1:{port}/healthz", proc, timeout=90)
        second = subprocess.run(
            [sys.executable, "manage.py", "up", "--port", str(free_port())],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        tree = _children(proc.pid)
        names = " ".join(_cmdline(c) for c in tree)
        for part in ("uvicorn", "worker", "beat", "simulate", "simulator.engine", "redis-server"):
            assert part in names, f"{part} is not running under sparkops up: {names}"
    except BaseException as exc:
        proc.send_signal(signal.SIGTERM)
        raise AssertionError(f"{exc}\n--- sparkops up said:\n{proc.communicate(timeout=60)[0][-8000:]}") from exc
    assert second.returncode != 0
    assert f"another `sparkops up` (pid {proc.pid}) is already running with this var dir" in second.stderr, (
        second.stdout[-2000:] + second.stderr[-2000:]
    )
    proc.kill()
    proc.communicate(timeout=10)
    deadline = time.monotonic() + 5.0
    while [c for c in tree if _alive(c)] and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = [_cmdline(c) for c in tree if _alive(c)]
    for process in tree:  # do not leave them to the next test if the assertion below fails
        if _alive(process):
            process.kill()
    assert not alive, f"still running 5 s after sparkops up was SIGKILLed: {alive}"
    with socket.socket() as sock:  # the web port is free again (for a server: SO_REUSEADDR, as uvicorn binds)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
    with open(tmp_path / "up.lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # and so is the var dir


def test_a_child_that_dies_is_reported_and_stops_the_stack(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL", "SPARKOPS_TEST_DB_NAME")}
    env.update({"SPARKOPS_VAR_DIR": str(tmp_path), "SPARKOPS_ADMIN_PASSWORD": ADMIN_PASSWORD})
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "up", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_http(f"http://127.0.0.1:{port}/healthz", proc, timeout=90)
        children = _children(proc.pid)
        # The worker (beat, which exits when the database is away for minutes, is started again:
        # tests/test_supervisor.py).
        worker = next(c for c in children if " worker " in f" {_cmdline(c)} ")
        worker.kill()
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0
    assert f"worker (pid {worker.pid}) exited with status -9; stopping the stack" in output, output[-3000:]
    assert "stopped web" in output and "stopped redis-server" in output
    assert not [_cmdline(c) for c in children if _alive(c)]
