"""Playbook checks: each on its own, and over the simulated box (CLI, pages, card badge)."""

import json
from types import SimpleNamespace

import pytest
from django.core.management import call_command

from sparkops.audit.checks import CHECKS
from sparkops.audit.thresholds import parse_overrides

GOOD = {
    "unit": {
        "unit": "a.service",
        "restart": "always",
        "start_limit_burst": 3,
        "start_limit_interval_usec": "1h",
        "timeout_start_usec": "20min",
        "type": "simple",
        "exec_start_post": [{"argv": ["/usr/local/bin/wait-ready", "8012", "1080"]}],
        "edges": {"After": ["network-online.target", "b.service"]},
        "edge_states": {
            "network-online.target": {"LoadState": "loaded", "UnitFileState": "static"},
            "b.service": {"LoadState": "loaded", "UnitFileState": "enabled"},
        },
        "memory_high": str(105 << 30),
        "memory_max": str(112 << 30),
    },
    "environment": {
        "MAX_JOBS": "4",
        "NVCC_THREADS": "1",
        "TORCHINDUCTOR_COMPILE_THREADS": "4",
        "FLASHINFER_NVCC_THREADS": "1",
        "PATH": "/usr/local/cuda/bin:/usr/bin",
        "CUDA_HOME": "/usr/local/cuda",
    },
    "flags": {"flags": {"--gpu-memory-utilization": "0.45"}},
}


def run(key, data, kind="vllm", **overrides):
    engine = SimpleNamespace(name="a", kind=kind)
    return CHECKS[key].run([(engine, data)], settings={**CHECKS[key].DEFAULTS, **overrides})


def with_unit(**changes):
    return {**GOOD, "unit": {**GOOD["unit"], **changes}}


def test_every_check_passes_the_playbook_unit():
    for key in (
        "restart_always_bounded",
        "compile_caps",
        "cuda_on_path",
        "readiness_budget",
        "after_enabled_units",
        "memory_max_set",
        "memory_share_sum",
    ):
        assert [r.status for r in run(key, GOOD)] == ["pass"], key


def test_each_check_fails_its_trap_with_evidence_and_fix():
    (r,) = run("restart_always_bounded", with_unit(restart="on-failure"))
    assert r.status == "fail" and "Restart=on-failure" in r.evidence and "Restart=always" in r.fix
    assert run("restart_always_bounded", with_unit(start_limit_burst=0))[0].status == "fail"
    (r,) = run("compile_caps", {**GOOD, "environment": {"MAX_JOBS": "20"}})
    assert r.status == "fail" and "MAX_JOBS=20 (cap 4)" in r.evidence and "NVCC_THREADS" in r.evidence
    assert (
        run("compile_caps", {**GOOD, "environment": {**GOOD["environment"], "MAX_JOBS": "8"}}, max_jobs=8)[0].status
        == "pass"
    )
    assert run("compile_caps", GOOD, kind="llamacpp") == []  # llama.cpp compiles nothing at start
    (r,) = run("cuda_on_path", {**GOOD, "environment": {"MAX_JOBS": "4"}})
    assert r.status == "fail" and "lacks /usr/local/cuda/bin" in r.evidence and "CUDA_HOME unset" in r.evidence
    (r,) = run("readiness_budget", with_unit(timeout_start_usec="15min"))
    assert r.status == "fail" and "budget 1080 s" in r.evidence and "15min" in r.evidence
    assert run("readiness_budget", with_unit(exec_start_post=[]))[0].status == "warn"
    dead = with_unit(
        edge_states={
            "network-online.target": {"LoadState": "loaded", "UnitFileState": "static"},
            "b.service": {"LoadState": "loaded", "UnitFileState": "disabled"},
        }
    )
    (r,) = run("after_enabled_units", dead)
    assert r.status == "fail" and "b.service: loaded/disabled" in r.evidence
    (r,) = run("memory_max_set", with_unit(memory_max="infinity"))
    assert r.status == "fail" and "MemoryHigh=105G only" in r.evidence


def test_box_checks_cold_starts_and_memory_shares():
    a, b = SimpleNamespace(name="a", kind="vllm"), SimpleNamespace(name="b", kind="sglang")
    da = GOOD
    db = {
        **GOOD,
        "unit": {**GOOD["unit"], "unit": "b.service", "edges": {"After": []}},
        "flags": {"flags": {"--mem-fraction-static": "0.45"}},
    }
    check = CHECKS["cold_starts_serialized"]
    assert [r.status for r in check.run([(a, da), (b, db)], settings={})] == ["pass"]  # a is After= b
    da2 = {**GOOD, "unit": {**GOOD["unit"], "edges": {"After": ["network-online.target"]}}}
    (r,) = check.run([(a, da2), (b, db)], settings={})
    assert r.status == "fail" and "cold starts not serialized" in r.evidence
    (r,) = CHECKS["memory_share_sum"].run([(a, da), (b, db)], settings={"headroom": 0.15})
    assert r.status == "fail" and "= 0.90 (limit 0.85)" in r.evidence
    assert CHECKS["memory_share_sum"].run([(a, da), (b, db)], settings={"headroom": 0.1})[0].status == "pass"


def test_thresholds_from_the_command_line_are_checked():
    assert parse_overrides(["compile_caps.max_jobs=8"]) == {"compile_caps": {"max_jobs": 8}}
    with pytest.raises(ValueError, match=r"thresholds: .*compile_caps.max_jobs"):
        parse_overrides(["compile_caps.nope=1"])
    with pytest.raises(ValueError, match="max_jobs takes a whole number"):
        parse_overrides(["compile_caps.max_jobs=many"])


@pytest.mark.django_db(transaction=True)
def test_cli_page_and_badge_on_the_simulated_box(box_engines, sim_box, capsys, client, viewer):
    with pytest.raises(SystemExit) as exit_:
        call_command("audit", "--json")
    assert exit_.value.code == 1
    report = json.loads(capsys.readouterr().out)
    failing = {(r["check"], r["subject"]) for r in report["results"] if r["status"] == "fail"}
    # the simulated llama.cpp unit orders itself after a disabled unit; nemotron's Restart=on-failure
    assert ("after_enabled_units", "lla") in failing and ("restart_always_bounded", "nemotron") in failing
    assert ("compile_caps", "nemotron") not in failing and ("memory_max_set", "lla") in failing
    with pytest.raises(SystemExit):
        call_command("audit", "--engine", "lla", "--no-observe")
    text = capsys.readouterr().out
    assert "FAIL  lla" in text and "demo-vision.service: loaded/disabled" in text and "fix: After= only orders" in text
    client.force_login(viewer)
    page = client.get(f"/hosts/{box_engines['lla'].host.name}/audit/").content.decode()
    assert "demo-vision.service: loaded/disabled" in page and "systemctl enable" in page
    from dashboard.templatetags.audit_tags import audit_badge
    from sparkops.launch.observer import failing_counts

    lla = box_engines["lla"]
    assert failing_counts(list(box_engines.values()))[lla.pk] >= 2  # after_enabled_units, memory_max_set
    lla.latest = {**(lla.latest or {}), "audit_failing": failing_counts(list(box_engines.values()))[lla.pk]}
    assert "audit: " in audit_badge(lla) and "/engines/lla/audit/" in audit_badge(lla)
