"""The audit page's fix in real headless Chromium against uvicorn on the test database: an admin follows the
audit's "Preview the drop-in", reads the diff, applies it; the box's worker (its task, run here) writes the
drop-in into the simulated box, which reloads it; the page then shows the outcome and links the observed
change-log entry, which names the file. A viewer sees the diff and no button. Desk and phone screenshots."""

import threading
from pathlib import Path

import pytest

from dashboard.models import Engine, Host
from sparkops.changelog.models import Entry
from sparkops.controls.unitfix_tasks import unit_fix
from tests.boxes import worker_reported
from tests.chromium import skip_without_chromium
from tests.live.test_browser import Session, browser  # noqa: F401  (browser: the shared Chromium fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
FILE = "50-sparkops-restart_always_bounded.conf"

skip_without_chromium()


def in_thread(fn, *args):
    """FN(*ARGS) on a thread of its own: Playwright's sync API holds an event loop in this one, and the
    launch observer's engine account is read with asyncio.run."""
    from django.db import connection

    out = []

    def run():
        try:
            out.append(fn(*args))
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(120)
    assert out, f"{fn.__name__} did not finish"
    return out[0]


@pytest.fixture
def box(tmp_path, settings, monkeypatch):
    from simulator.client import Simulation
    from tests.simbox import point_collectors_at

    with Simulation(engines=["vllm:fixweb,restart=on-failure"], state_dir=tmp_path / "sim", ready_timeout=60) as sim:
        point_collectors_at(sim, settings, monkeypatch, gpu=False)
        yield sim


def test_preview_apply_and_the_logged_change_in_chromium(box, settings, admin_user, viewer, browser, shared_web):
    from sparkops.launch.observer import observe_now

    host = Host.objects.create(name=settings.SPARKOPS_HOST_NAME, unit_actions=True)
    engine = Engine.objects.create(
        name="fixweb", kind="vllm", url=box.url("fixweb"), host=host, unit=box.unit("fixweb"), status="up"
    )
    assert in_thread(observe_now, engine) is not None
    settings.SPARKOPS_UNIT_ACTIONS = True
    _web, base, _log = shared_web

    reader = Session(browser, base, viewer)
    reader.page.goto(base + "/engines/fixweb/audit/fix/")
    assert "+Restart=always" in reader.page.inner_text("section[data-check=restart_always_bounded] pre")
    assert reader.page.locator("button[data-apply]").count() == 0 and not reader.errors, reader.errors

    ada = Session(browser, base, admin_user)
    page = ada.page
    page.goto(base + "/engines/fixweb/audit/")
    page.click("tr[data-check=restart_always_bounded] a.unit-fix-link")
    page.wait_for_url(base + "/engines/fixweb/audit/fix/")
    diff = page.inner_text("section[data-check=restart_always_bounded] pre")
    assert f"+++ /etc/systemd/system/{engine.unit}.d/{FILE}" in diff and "+StartLimitBurst=3" in diff, diff
    ada.shot("unit-fix-preview-desk")
    in_thread(worker_reported, host)  # the box's worker is there to take the fix
    page.click("button[data-apply=restart_always_bounded]")
    page.wait_for_selector("text=Sent to")
    assert "requested by ada" in page.inner_text(".unit-fix-log")
    dropin = Path(box.root) / f"etc/systemd/system/{engine.unit}.d/{FILE}"
    assert not dropin.exists()  # the web only asked

    in_thread(unit_fix, engine.pk, ["restart_always_bounded"], admin_user.pk)  # what the box's worker runs
    assert dropin.exists() and box.show("fixweb")["Restart"] == "always"
    page.reload()
    log = page.inner_text(".unit-fix-log")
    assert f"wrote {FILE}" in log and "the observed change" in log, log
    assert page.locator("section[data-check=restart_always_bounded]").count() == 0  # passes now
    ada.shot("unit-fix-done-desk")
    page.set_viewport_size({"width": 390, "height": 844})
    ada.shot("unit-fix-done-phone")
    page.click("a.observed-entry")
    observed = Entry.objects.get(kind="flag_change")
    page.wait_for_url(f"{base}/changelog/{observed.pk}/")
    assert FILE in page.inner_text("body") and not ada.errors, ada.errors
