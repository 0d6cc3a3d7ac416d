"""One runtime directory per install (sparkops/controls/runtime.py, issue 47 item 3), on real sockets:
a worker refuses a runtime directory whose stop socket another install's live worker holds, takes
over one whose worker is gone, and records it in its var dir, where a fix written from another
shell (root's default /run/sparkops) finds the socket of the box's own worker."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from sparkops.controls import runtime
from sparkops.controls.unitfix_checks import engine_settings
from sparkops.poller.stopsocket import StopListener


@pytest.fixture
def other_install(tmp_path):
    """Another install's worker on this box: its claim on tmp/run and its stop listener live there."""
    run, var = tmp_path / "run", tmp_path / "other-var"
    sock = str(run / "stopped.sock")
    listener = StopListener(sock, lambda stop: None).start()
    runtime.runtime_claim(runtime_dir=str(run), stop_socket=sock, var_dir=var)
    yield run, var, listener
    if listener.thread.is_alive():  # the test may have stopped it
        listener.stop()


def _mine(settings, monkeypatch, tmp_path, run):
    monkeypatch.delenv("SPARKOPS_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("SPARKOPS_STOP_SOCKET", raising=False)
    settings.VAR_DIR = tmp_path / "my-var"
    settings.SPARKOPS_RUNTIME_DIR, settings.SPARKOPS_STOP_SOCKET = str(run), str(run / "stopped.sock")


@pytest.mark.django_db
def test_a_worker_refuses_the_runtime_dir_another_installs_live_worker_holds(
    other_install, settings, monkeypatch, tmp_path
):
    run, other_var, listener = other_install
    _mine(settings, monkeypatch, tmp_path, run)
    with pytest.raises(CommandError) as refused:
        call_command("worker", "--host", "box-a")
    text = str(refused.value)
    assert text.startswith(f"refused: the runtime directory {run} belongs to the SparkOps install at {other_var}")
    assert f"listens on {run / 'stopped.sock'}" in text and "SPARKOPS_RUNTIME_DIR=" in text, text
    assert not (tmp_path / "my-var" / runtime.RECORD).exists()  # nothing recorded, nothing taken
    assert '"var_dir": "' + str(other_var) in (run / runtime.CLAIM).read_text()

    listener.stop()  # the other install's worker is gone: its claim is taken over
    claim = runtime.runtime_claim(
        runtime_dir=settings.SPARKOPS_RUNTIME_DIR, stop_socket=settings.SPARKOPS_STOP_SOCKET, var_dir=settings.VAR_DIR
    )
    assert claim["var_dir"] == str((tmp_path / "my-var").resolve())


def test_a_fix_written_from_another_shell_names_the_socket_of_the_install_s_own_worker(settings, monkeypatch, tmp_path):
    """The worker (a user's) recorded its socket; `unit fix` run as root, whose default would be
    /run/sparkops/stopped.sock, writes the worker's into the stop hook."""
    worker_run = tmp_path / "xdg" / "sparkops"
    _mine(settings, monkeypatch, tmp_path, worker_run)
    runtime.runtime_claim(
        runtime_dir=str(worker_run), stop_socket=str(worker_run / "stopped.sock"), var_dir=settings.VAR_DIR
    )
    settings.SPARKOPS_RUNTIME_DIR, settings.SPARKOPS_STOP_SOCKET = "/run/sparkops", "/run/sparkops/stopped.sock"
    items, _note = engine_settings(SimpleNamespace(name="e"), {}, "stop_hook", {})
    (hook,) = [value for _section, key, value in items if key == "ExecStopPost"]
    assert f"--socket {worker_run / 'stopped.sock'} %n" in hook and "/run/sparkops" not in hook, hook
    assert runtime.runtime_dir() == str(worker_run)  # launches from that shell share the worker's lock
