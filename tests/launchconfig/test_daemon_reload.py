"""A unit edited without `systemctl daemon-reload`: the running engine (its /proc/PID/cmdline) is
held against what the unit's files say, on the audit page and in `sparkops audit`."""

import io
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

from sparkops.audit.checks import CHECKS
from sparkops.audit.run import audit
from sparkops.changelog.models import Entry
from sparkops.launch.observer import Observer
from sparkops.launch.snapshot import latest_snapshot

pytestmark = [pytest.mark.django_db(transaction=True)]


def systemctl(sim, *args):
    return subprocess.run(
        [str(sim.bin_dir / "sim-systemctl"), *args],
        env=sim.env(),
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )


def finding(engines):
    results = audit(list(engines.values()), only_engine=engines["nemotron"])
    return next(r for r in results if r.check == "running_matches_unit" and r.subject == "nemotron")


def cli_audit(*args):
    out = io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        call_command("audit", "--engine", "nemotron", "--no-observe", *args, stdout=out)
    return exit_.value.code, out.getvalue()


def test_an_edit_without_daemon_reload_is_named_until_reloaded_and_restarted(box_engines, sim_box, client, viewer):
    engines = box_engines
    Observer().observe(list(engines.values()))
    ok = finding(engines)
    assert ok.status == "pass"
    pid = sim_box.show("nemotron")["MainPID"]
    cmdline = (Path(sim_box.state_dir) / "proc" / pid / "cmdline").read_bytes().split(b"\0")
    assert cmdline[:2] == [b"/opt/vllm/bin/vllm", b"serve"] and b"131072" in cmdline

    # An operator edits the unit in an editor and restarts without a daemon-reload.
    fragment = sim_box.root / "etc/systemd/system/nemotron.service"
    fragment.write_text(fragment.read_text().replace("--max-model-len 131072", "--max-model-len 262144"))
    props = systemctl(sim_box, "show", "nemotron.service", "-p", "NeedDaemonReload,ExecStart").stdout
    assert "NeedDaemonReload=yes" in props and "--max-model-len 131072" in props  # systemd holds the old unit
    cat = systemctl(sim_box, "cat", "nemotron.service").stdout
    assert cat.startswith("# Warning: nemotron.service changed on disk, the version systemd has loaded is outdated.")
    sim_box.restart("nemotron")
    sim_box.wait_ready("nemotron")  # the loaded (old) unit started again
    Observer().observe(list(engines.values()))
    stale = finding(engines)
    assert stale.status == "fail"
    assert stale.evidence == (
        "the running engine was started from an older unit: these flags differ: --max-model-len runs 131072, "
        "the files say 262144 (set in /etc/systemd/system/nemotron.service) "
        "(NeedDaemonReload=yes: edited without `systemctl daemon-reload`)"
    )
    assert "systemctl daemon-reload" in stale.fix
    # What runs is what the snapshot holds: the log writes no change the restart did not bring.
    snap = latest_snapshot(engines["nemotron"])
    assert snap.data["flags"]["flags"]["--max-model-len"] == "131072"
    assert snap.data["account"]["max_model_len"] == 131072
    assert not Entry.objects.filter(flags__flag="--max-model-len", flags__new="262144").exists()
    code, text = cli_audit()
    assert code == 1
    assert "FAIL  nemotron" in text and "these flags differ: --max-model-len runs 131072" in text
    client.force_login(viewer)
    page = client.get(f"/hosts/{engines['nemotron'].host.name}/audit/").content.decode()
    assert "the running engine was started from an older unit" in page

    # daemon-reload (the simulated systemctl asks the supervisor), not yet a restart.
    assert systemctl(sim_box, "daemon-reload").returncode == 0
    assert "NeedDaemonReload=no" in systemctl(sim_box, "show", "nemotron.service", "-p", "NeedDaemonReload").stdout
    Observer().observe(list(engines.values()))
    reloaded = finding(engines)
    assert reloaded.status == "fail" and reloaded.evidence.endswith("(reloaded but not restarted since)")

    sim_box.restart("nemotron")
    sim_box.wait_ready("nemotron")
    Observer().observe(list(engines.values()))
    assert finding(engines).status == "pass"
    snap = latest_snapshot(engines["nemotron"])
    assert snap.data["flags"]["flags"]["--max-model-len"] == "262144"
    assert snap.data["flags"]["origins"]["--max-model-len"] == "/etc/systemd/system/nemotron.service"
    entry = Entry.objects.get(pk=snap.logged_entry_id)  # the restart that brought it writes the entry
    assert [(f.flag, f.old, f.new) for f in entry.flags.all()] == [("--max-model-len", "131072", "262144")]
    code, text = cli_audit("--json")
    import json

    rows = [r for r in json.loads(text)["results"] if r["check"] == "running_matches_unit"]
    assert rows and rows[0]["status"] == "pass"


@pytest.mark.django_db(transaction=False)
def test_the_same_flags_spelled_differently_are_not_a_difference():
    from types import SimpleNamespace

    check = CHECKS["running_matches_unit"]
    files = ["/opt/vllm/bin/vllm", "serve", "Q/8B", "--max-model-len", "131072", "--enable-prefix-caching"]
    running = ["/opt/vllm/bin/vllm", "serve", "Q/8B", "--enable-prefix-caching", "--max-model-len=131072"]
    data = {"unit": {"unit": "a.service", "exec_start": {"argv": files}, "running_argv": running}}
    engine = SimpleNamespace(name="a", kind="vllm")
    assert [r.status for r in check.run([(engine, data)], settings={})] == ["pass"]
    data["unit"]["running_argv"] = [*running[:2], "Q/32B", *running[3:]]
    (result,) = check.run([(engine, data)], settings={})
    assert result.status == "fail" and "model runs Q/32B, the files say Q/8B" in result.evidence
    data["unit"]["need_daemon_reload"], data["unit"]["running_argv"] = True, running
    assert [r.status for r in check.run([(engine, data)], settings={})] == ["warn"]
