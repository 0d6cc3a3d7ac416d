"""The audit's stop_hook check and its fix: the ExecStopPost= lines in force read from the unit's files
in systemd's order (an empty assignment clears them), the hook recognised however it is invoked, and
`sparkops unit fix`'s drop-in line naming the worker's socket."""

import sys
from types import SimpleNamespace

from sparkops.audit.checks import CHECKS, STOP_HOOK, stop_posts
from sparkops.controls.unitfix_checks import engine_settings

ENGINE = SimpleNamespace(name="a", kind="vllm")
UNIT = {"unit": "a.service"}


def files(*texts):
    return [{"path": f"/etc/systemd/system/a.service.d/{i}.conf", "text": t} for i, t in enumerate(texts)]


def check(data):
    return CHECKS["stop_hook"].engine(ENGINE, data, {})


def test_the_lines_in_force_follow_systemds_order():
    assert stop_posts(
        files(
            "[Service]\nExecStopPost=/bin/a\n",
            "[Service]\nExecStopPost=\nExecStopPost=/bin/b\n[Install]\nExecStopPost=/bin/not-a-service-line\n",
            "[Service]\nExecStopPost=/bin/c\n",
        )
    ) == ["/bin/b", "/bin/c"]


def test_the_hook_is_recognised_however_it_is_invoked():
    for line in (
        "/opt/venv/bin/sparkops stopped --socket /run/sparkops/stopped.sock %n",
        "/usr/bin/python3 -m sparkops.cli stopped %n",
        "/usr/bin/python3 -m sparkops.controls.stopped --socket /x %n",
        "/usr/bin/python3 -m dashboard.controls.stopped --socket /x %n",  # a drop-in written before the move
    ):
        assert STOP_HOOK.search(line), line
    assert not STOP_HOOK.search("/usr/bin/sparkops wait-ready --url http://x --budget 60")
    assert not STOP_HOOK.search("/bin/logger stopped")


def test_warn_without_the_hook_pass_with_it_nothing_without_files():
    bare = {"unit": UNIT, "observed": {"files": files("[Service]\nExecStart=/bin/engine\n")}}
    status, evidence = check(bare)
    assert status == "warn" and "no ExecStopPost= stop hook" in evidence
    hooked = {"unit": UNIT, "observed": {"files": files("[Service]\nExecStopPost=/v/bin/sparkops stopped %n\n")}}
    assert check(hooked) == ("pass", "ExecStopPost=/v/bin/sparkops stopped %n")
    assert check({"unit": UNIT, "observed": {}}) is None  # the files were not read: nothing to say
    assert check({"unit": None, "observed": {"files": files("")}}) is None  # hand-run: no unit


def test_the_fix_names_the_workers_socket(settings, tmp_path):
    settings.VAR_DIR = tmp_path  # no worker of this install has recorded its socket (controls/runtime.py)
    settings.SPARKOPS_STOP_SOCKET = "/run/user/1000/sparkops/stopped.sock"
    items, note = engine_settings(ENGINE, {"unit": UNIT}, "stop_hook", {})
    ((section, key, value),) = items
    assert (section, key) == ("Service", "ExecStopPost") and note
    assert value == f"{sys.executable} -m sparkops.controls.stopped --socket /run/user/1000/sparkops/stopped.sock %n"
    assert STOP_HOOK.search(value)  # the check passes once it is written
