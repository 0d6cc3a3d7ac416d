"""Launch observation and the launch audit against the real systemd 252 user manager (and the same
against the simulator's systemd): `After=` edges to units that are disabled or absent, the effective
environment with the file that set each variable, the restart budget from the manager's timestamps."""

import uuid

import pytest

from dashboard.services import audit as launch_audit
from dashboard.services.launchconfig import Observer, latest_snapshot

pytestmark = [pytest.mark.xdist_group("realsystemd"), pytest.mark.django_db]


def observed(engine):
    """ENGINE's launch configuration observed now (the poller's Observer, the product's own reading)."""
    Observer().observe([engine])
    snap = latest_snapshot(engine)
    assert snap is not None, f"no snapshot of {engine.name}"
    return snap.data


def audit_result(engine, key):
    found = [r for r in launch_audit.audit([engine], only_engine=engine) if r.check == key]
    assert len(found) == 1, found
    return found[0]


def disabled_unit(box):
    """A unit that is installed but not enabled: the simulator's demo-vision.service; for the real
    manager a unit file with an [Install] section that nobody enabled."""
    if box.kind == "sim":
        return "demo-vision.service"
    name = f"offline-{uuid.uuid4().hex[:6]}.service"
    box.files.append(
        box.m.write_unit(
            name,
            "[Unit]\nDescription=installed, never enabled\n[Service]\nExecStart=/bin/true\n"
            "[Install]\nWantedBy=default.target\n",
        )
    )
    return name


def test_after_a_disabled_unit_and_a_missing_unit_fails_the_audit(box, engine_of):
    box.add("aft")
    engine = engine_of(box, "aft")
    off, gone = disabled_unit(box), f"gone-{uuid.uuid4().hex[:6]}.service"
    path = box.dropin("aft", "30-order.conf", f"[Unit]\nAfter={off} {gone}\n")
    data = observed(engine)
    unit = data["unit"]
    assert off in unit["edges"]["After"] and gone in unit["edges"]["After"], unit["edges"]
    states = unit["edge_states"]
    assert states[off]["LoadState"] == "loaded" and states[off]["UnitFileState"] == "disabled", states
    assert states[gone]["LoadState"] == "not-found" and states[gone]["UnitFileState"] == "", states
    result = audit_result(engine, "after_enabled_units")
    assert result.status == "fail", result
    assert f"{off}: loaded/disabled" in result.evidence, result.evidence
    assert f"{gone}: not-found/not installed" in result.evidence, result.evidence
    assert path in result.evidence, result.evidence
