"""sparkops/collectors/sockowner.py on real sockets and processes: whose is a listening port."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from sparkops.collectors import sockowner

HOLD = "import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(600)"


@pytest.fixture
def holder():
    """A process of its own listening on a port: (its Popen, the port)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline())
    yield proc, port
    proc.kill()
    proc.wait()


def test_sock_diag_and_proc_net_tcp_agree_on_the_listening_sockets_inodes():
    v4, v6 = socket.socket(), socket.socket(socket.AF_INET6)
    v4.bind(("127.0.0.1", 0))
    v4.listen()
    port = v4.getsockname()[1]
    v6.bind(("::1", port))
    v6.listen()
    client = socket.create_connection(("127.0.0.1", port))  # an established socket on the port: not listening
    try:
        inodes = sockowner.listening_inodes(port)
        assert inodes == sockowner._proc_listening(port) and len(inodes) == 2, inodes
        assert {f"socket:[{i}]" for i in inodes} == {
            sockowner.os.readlink(f"/proc/self/fd/{s.fileno()}") for s in (v4, v6)
        }
    finally:
        for s in (client, v4, v6):
            s.close()
    assert sockowner.listening_inodes(port) == set()


def test_the_port_is_its_holders_own_and_not_another_processes(holder):
    proc, port = holder
    assert sockowner.port_owner_pids(port) == {proc.pid}
    assert sockowner.Owners(port=port, mainpid=proc.pid).check().own
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        verdict = sockowner.Owners(port=port, mainpid=sleeper.pid, whose="unit x's").check()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not verdict.own
    assert verdict.text.startswith(f"port {port} is served by pid {proc.pid} (") and "not by unit x's" in verdict.text


def test_a_process_tree_counts_its_children():
    parent = subprocess.Popen(["sh", "-c", f'{sys.executable} -c "{HOLD}"'], stdout=subprocess.PIPE, text=True)
    try:
        port = int(parent.stdout.readline())
        assert sockowner.Owners(port=port, mainpid=parent.pid).check().own  # the listener is sh's child
        assert parent.pid in sockowner.tree_pids(parent.pid) and len(sockowner.tree_pids(parent.pid)) == 2
    finally:
        for pid in sockowner.tree_pids(parent.pid):
            sockowner.os.kill(pid, 9)
        parent.wait()


def test_nothing_listening_is_said():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]  # bound, not listening
    try:
        verdict = sockowner.Owners(port=port, mainpid=1).check()
    finally:
        s.close()
    assert not verdict.own and verdict.text == f"nothing listens on port {port} on this box"


def test_the_hand_run_scan_leaves_out_an_engine_whose_port_another_process_serves(holder, tmp_path, settings):
    """`vllm serve … --port P` loading (it listens only once built) while another process holds P: the
    answers at P are not its, so the scan does not take it for the engine at P; once the other is
    gone it is found again (still loading, nobody holds P)."""
    import os

    from sparkops.collectors import handrun
    from tests.realsystemd.shims import install

    other, port = holder
    settings.SPARKOPS_PROC_ROOT = "/proc"
    bin_dir = install(tmp_path / "bin")
    env = {**os.environ, "SIM_NEVER_SERVES": "1", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    loading = subprocess.Popen(
        ["vllm", "serve", "m", "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        assert not any(p["pid"] == loading.pid for p in handrun.scan())
        other.kill()
        other.wait()
        assert any(p["pid"] == loading.pid and p["port"] == port for p in handrun.scan())
    finally:
        loading.kill()
        loading.wait()
