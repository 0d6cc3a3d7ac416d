"""Launch observation of engines against the real systemd 252 user manager and the simulator's
systemd: an engine started by hand in a shell, outside the manager, found by the process scan with
its own environment (issue 26 item 7); a flag a drop-in changed that the change log does not record,
`config_drift` naming the drop-in (item 4)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from simulator.supervisor import REPO_ROOT
from sparkops.ports import free_port
from tests.waiting import wait_for

from .conftest import WAIT_S, _healthy

pytestmark = [pytest.mark.django_db]

# `vllm` as a venv's console script: the kernel runs `PYTHON …/bin/vllm serve MODEL --port P …`, the
# command line the process scan knows vLLM by, and it serves the simulator's vLLM engine.
VLLM = r"""#!{python}
import sys
sys.path.insert(0, {root!r})
args = sys.argv[1:]
assert args[:1] == ["serve"], args
opts, i = {{}}, 2
while i < len(args):
    key, _, value = args[i].partition("=")
    if not value:
        value, i = args[i + 1], i + 1
    opts[key] = value
    i += 1
argv = ["--kind", "vllm", "--name", args[1], "--model", args[1], "--port", opts["--port"], "--load-seconds", "0.3"]
for flag in ("--max-model-len",):
    if flag in opts:
        argv += [flag, opts[flag]]
if "--gpu-memory-utilization" in opts:
    argv += ["--memory-share", opts["--gpu-memory-utilization"]]
from simulator.engine import main
sys.exit(main(argv))
"""


def vllm_script(root):
    path = root / "bin" / "vllm"
    path.parent.mkdir(exist_ok=True)
    path.write_text(VLLM.format(python=sys.executable, root=str(REPO_ROOT)))
    path.chmod(0o755)
    return path


def restarted(box, name):
    """Restart BOX's engine NAME and wait for a new main process that answers."""
    before = box.show(name).get("MainPID")
    box.restart(name)

    def up_again():
        props = box.show(name)
        return props.get("MainPID") not in (None, "", "0", before) and props.get("ActiveState") == "active"

    assert wait_for(lambda: up_again() and _healthy(box.url(name)), timeout=WAIT_S), box.show(name)


def host_engine(box, engine_of, name):
    engine = engine_of(box, name)
    return engine, engine.host


@pytest.fixture
def shell_engine(tmp_path):
    """start(port, env): `vllm serve` started from a shell (sh -c '… exec vllm serve …'), outside any
    manager, with ENV as its whole environment; killed at the end."""
    procs = []

    def start(port, env):
        vllm = vllm_script(tmp_path)
        cmd = f"exec {vllm} serve tiny-random --port {port} --gpu-memory-utilization 0.2 --max-model-len 4096"
        proc = subprocess.Popen(
            ["sh", "-c", cmd],
            env=env,
            stdout=open(tmp_path / f"shell-{port}.log", "wb"),  # noqa: SIM115 (the shell's log: open while it runs)
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        procs.append(proc)
        assert wait_for(lambda: _healthy(f"http://127.0.0.1:{port}"), timeout=WAIT_S), (
            tmp_path / f"shell-{port}.log"
        ).read_text()
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_an_engine_started_by_hand_outside_the_manager_is_found_with_its_own_environment(box, engine_of, shell_engine):
    """Beside an engine under a unit (whose process reads like `vllm serve` too: the scan leaves it to
    its unit by its cgroup), an engine started from a shell becomes `hand-run-PORT` with a snapshot of
    its argv and the environment it runs with (/proc/PID/environ: the shell's compile caps, none of
    the unit's); the compile-caps audit judges that environment; gone, it is retired."""
    from dashboard.models import Engine
    from sparkops.audit.run import audit
    from sparkops.launch.observer import Observer

    if box.kind == "real":
        box.add("uni", start=False)
        vllm = vllm_script(box.m.root)
        port = box.ports["uni"]
        box.dropin(
            "uni",
            "20-vllm.conf",
            f"[Service]\nExecStart=\nExecStart={vllm} serve unit-model --port {port} --max-model-len 8192\n"
            "Environment=MAX_JOBS=4 NVCC_THREADS=1\n",
        )
        box.restart("uni")
        box.wait_ready("uni")
        hand_port = free_port()
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": "/root",
            "VIRTUAL_ENV": "/root/venv-smoke",
            "MAX_JOBS": "32",
            "NVCC_THREADS": "8",
            "TORCHINDUCTOR_COMPILE_THREADS": "4",
            "FLASHINFER_NVCC_THREADS": "1",
        }
        hand = shell_engine(hand_port, env)
        pid, want_env = hand.pid, env  # sh exec'd vllm: the same process
        unit_pid = int(box.show("uni")["MainPID"])
        cgroup = Path(f"/proc/{unit_pid}/cgroup").read_text()
        assert f"/user@0.service/app.slice/{box.unit('uni')}" in cgroup, cgroup  # what the scan reads
        want_caps, want_share = "MAX_JOBS=32 (cap 4); NVCC_THREADS=8 (cap 1)", "0.2"

        def stop_hand_run():
            os.killpg(hand.pid, signal.SIGKILL)
            hand.wait(timeout=30)

    else:  # the simulator's hand-run engine: a fresh venv's environment, without a single cap
        box.add_together(["uni", "smoke"], hand_run=["smoke"])
        hand_port, pid = int(box.url("smoke").rsplit(":", 1)[1]), None
        want_env = {"VIRTUAL_ENV": "/home/op/venv-smoke", "USER": "op"}
        want_caps = (
            "unset: MAX_JOBS, NVCC_THREADS, TORCHINDUCTOR_COMPILE_THREADS, FLASHINFER_NVCC_THREADS "
            "in the environment of a hand-run engine (no unit)"
        )
        want_share = "0.15"

        def stop_hand_run():
            box.sims["smoke"].stop_unit("smoke")

    engine, host = host_engine(box, engine_of, "uni")
    Observer().observe([engine], host=host)
    found = Engine.objects.get(name=f"hand-run-{hand_port}")
    assert found.kind == "vllm" and found.unit == "" and found.retired_at is None, found
    assert not Engine.objects.filter(name=f"hand-run-{box.url('uni').rsplit(':', 1)[1]}").exists()
    snap = found.config_snapshots.get()
    data = snap.data
    assert data["launch"] == "hand-run" and data["unit"] is None, data["launch"]
    pid = pid or data["observed"]["process"]["pid"]
    assert data["observed"]["process"]["pid"] == pid, data["observed"]["process"]
    assert data["flags"]["flags"]["--gpu-memory-utilization"] == want_share, data["flags"]
    assert data["flags"]["origins"]["--gpu-memory-utilization"].endswith(f"/proc/{pid}/cmdline"), data["flags"]
    assert {k: data["environment"].get(k) for k in want_env} == want_env, data["environment"]
    (caps,) = [r for r in audit([engine, found], only_engine=found) if r.check == "compile_caps"]
    assert caps.status == "fail" and caps.evidence == want_caps, caps
    stop_hand_run()
    Observer().observe([engine], host=host)
    found.refresh_from_db()
    assert found.retired_at is not None  # its process is gone; its history stays


def test_a_drop_in_the_change_log_does_not_record_is_config_drift_naming_it(box, engine_of):
    """The change log says --max-model-len went to 8192 (alice's entry); a later drop-in that resets
    ExecStart= with the old 2048 is what runs after the restart: config_drift fires and names that
    drop-in, as the manager's files give it (the real unit directory, the simulator's /etc)."""
    from django.utils import timezone

    from sparkops.alerts.models import AlertEvent
    from sparkops.changelog.grammar import FlagLine
    from sparkops.changelog.services import entry_create
    from sparkops.launch.observer import Observer

    box.add("drf", **({"max_model_len": 2048} if box.kind == "real" else {}))
    engine, host = host_engine(box, engine_of, "drf")
    observer = Observer()
    observer.observe([engine], host=host)
    entry_create(
        author_name="alice",
        effective_at=timezone.now() - timedelta(minutes=1),
        kind="flag_change",
        title="Raise --max-model-len 2048 → 8192 on drf",
        engines=[engine],
        flags=[FlagLine("--max-model-len", "2048", "8192")],
    )
    port = box.url("drf").rsplit(":", 1)[1]
    if box.kind == "real":
        window = "[Service]\nExecStart=\nExecStart=" + box.engine_argv("drf") + " --max-model-len {n}\n"
    else:
        window = (
            "[Service]\nExecStart=\nExecStart=/opt/vllm/bin/vllm serve Qwen/Qwen3-8B --host 127.0.0.1 "
            f"--port {port} --max-model-len {{n}}\n"
        )
    box.dropin("drf", "20-window.conf", window.format(n=8192))
    old = box.dropin("drf", "30-old.conf", window.format(n=2048))  # sorted after: it wins
    restarted(box, "drf")
    observer.observe([engine], host=host)
    event = AlertEvent.objects.get(rule="config_drift", subject="drf --max-model-len")
    assert event.state == "firing" and event.engine_id == engine.pk, event
    assert "--max-model-len: the change log says 8192" in event.message and "runs 2048" in event.message
    assert f"set in {old}" in event.message, (old, event.message)
    assert event.cause == "30-old.conf", event.cause
    # the drop-in removed and the unit restarted: 8192 runs, the drift resolves
    if box.kind == "real":
        os.unlink(old)
        box.files.remove(Path(old))
        box.m.systemctl("daemon-reload")
    else:
        box.sims["drf"].dropin("drf", "30-old.conf", None)
    restarted(box, "drf")
    Observer().observe([engine], host=host)
    event.refresh_from_db()
    assert event.state == "resolved", event.state
