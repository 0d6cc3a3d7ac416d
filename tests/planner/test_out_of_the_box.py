"""Issue 30 §2: the planner out of the box, in real headless Chromium. The demo's box: a vLLM
engine whose collector rows carry the KV memory from its boot line, a vLLM engine whose rows do
not (an older row), and a llama.cpp engine (no memory share at all). Every engine is named, none
is dropped from the box's sum, the llama.cpp one is not a red error, and "used now" is the host
card's figure. Screenshots at desk and phone sizes in artifacts/screenshots/."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from dashboard.models import Engine, Host, KVPoolEntry
from dashboard.models.ledgers import GIB
from tests.chromium import skip_without_chromium
from tests.live.test_browser import wait_for_js
from tests.test_issue30_pages import open_as  # a page logged in by session cookie

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
MEM_TOTAL, MEM_AVAILABLE = round(119.7 * GIB), round((119.7 - 48.3) * GIB)

skip_without_chromium()


@pytest.fixture
def demo_box(db):
    host = Host.objects.create(
        name="demo-box",
        # the host card's "Memory used" is MemTotal − MemAvailable: 48.3 GiB; the collector's own
        # mem_used_bytes is left out, so the page cannot take it from anywhere else
        latest={"host": {"mem_total_bytes": MEM_TOTAL, "mem_available_bytes": MEM_AVAILABLE}},
        last_report_at=timezone.now(),
    )
    kw = {"host": host, "status": "up"}
    vllm = Engine.objects.create(name="demo-vllm", kind="vllm", url="http://127.0.0.1:9", unit="v.service", **kw)
    old = Engine.objects.create(name="old-vllm", kind="vllm", url="http://127.0.0.1:9", unit="o.service", **kw)
    llama = Engine.objects.create(name="demo-llama", kind="llamacpp", url="http://127.0.0.1:9", **kw)
    at = timezone.now() - timedelta(hours=1)
    row = {"recorded_at": at, "source": KVPoolEntry.Source.COLLECTOR}
    # what the collector now writes after a restart: the KV memory from "Available KV cache memory: 24.38 GiB"
    KVPoolEntry.objects.create(
        engine=vllm, memory_share=0.15, window=32768, pool_tokens=766464, kv_memory_bytes=round(24.38 * GIB), **row
    )
    KVPoolEntry.objects.create(engine=old, memory_share=0.1, window=32768, pool_tokens=400000, **row)
    KVPoolEntry.objects.create(engine=llama, window=8192, pool_tokens=32768, **row)
    return host


def _page(chromium, live_server, viewer, viewport):
    return open_as(chromium, live_server, viewer, viewport)


def test_every_engine_is_named_and_counted_and_used_now_is_the_host_cards(chromium, live_server, viewer, demo_box):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = _page(chromium, live_server, viewer, {"width": 1280, "height": 800})
    page.goto(f"{live_server.url}/hosts/{demo_box.name}/")
    assert "48.3 GiB of 119.7 GiB" in page.inner_text("body")  # the host card
    page.goto(f"{live_server.url}/planner/{demo_box.name}/")
    box = page.inner_text("#box")
    assert "used now 48.3 GiB (MemTotal − MemAvailable, the host card's “Memory used”)" in box

    # the collector's row has KV GiB: tokens per GiB is learned, and 0.7 predicts on the box's memory
    vllm = page.locator("#plan-demo-vllm")
    assert vllm.locator('[data-out="tokens_per_gib"]').inner_text().startswith("31,438")  # 766,464 / 24.38
    vllm.locator("input[name=util]").fill("0.7")
    wait_for_js(page, "!document.querySelector('#plan-demo-vllm [data-out=pool_tokens]').innerText.startsWith('766')")
    assert vllm.locator('[data-out="error"]').inner_text() == "" and "needs" not in vllm.inner_text()
    assert vllm.locator('[data-out="kv_gib"]').inner_text() == "90.21 GiB"  # 24.38 + (0.7 − 0.15) × 119.7

    # a vLLM engine whose rows lack KV memory: named with what is missing, no red error, share counted
    old = page.locator("#plan-old-vllm")
    assert old.locator('[data-out="pool_tokens"]').inner_text() == "400,000 tokens"  # its measured share
    assert old.locator('[data-out="tokens_per_gib"]').inner_text() == "—"
    assert (
        old.locator('[data-out="missing"]')
        .inner_text()
        .startswith("Tokens per GiB not known: no ledger row at 32,768 records its KV memory")
    )
    old.locator("input[name=util]").fill("0.2")
    wait_for_js(page, "document.querySelector('#plan-old-vllm [data-out=missing]').innerText !== ''")
    assert "Not predicted: cannot predict old-vllm at util 0.2: no ledger row at 32,768 records its KV memory" in (
        old.locator('[data-out="missing"]').inner_text()
    )
    assert old.locator('[data-out="error"]').inner_text() == ""
    # llama.cpp: no share at all; named, not red, and counted in the rest of the box
    llama = page.locator("#plan-demo-llama")
    assert "Not predicted: its ledger rows record no memory share" in llama.inner_text()
    assert llama.locator(".bad").count() == 0 and llama.locator("input").count() == 0
    plan = page.inner_text("#box-plan")
    # 0.7 and 0.2 of 119.7 GiB, plus the rest of the box (48.3 − 0.25 × 119.7 = 18.4 GiB)
    assert plan.startswith("Planned: 126.1 of 119.7 GiB used (engines 107.7, rest of the box 18.4)")
    assert "Counted at their share, not predicted: old-vllm." in plan
    assert "not planned by share: demo-llama." in plan
    page.screenshot(path=str(SHOTS / "planner-out-of-the-box-desk.png"), full_page=True)
    assert page.errors == []

    phone = _page(chromium, live_server, viewer, {"width": 390, "height": 844})
    phone.goto(f"{live_server.url}/planner/{demo_box.name}/")
    wait_for_js(phone, "document.querySelector('#box-plan').innerText.startsWith('Planned')")
    wide = phone.evaluate(
        "[...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right > innerWidth + 1)"
        ".map(e => e.tagName + '.' + e.className)"
    )
    assert wide == []  # nothing of the planner is cut at the right edge (the site header is not this page's)
    phone.screenshot(path=str(SHOTS / "planner-out-of-the-box-phone.png"), full_page=True)
    assert phone.errors == []


def test_the_cli_names_the_engine_it_does_not_plan(demo_box):
    from .conftest import cli, plan_json

    out = plan_json("--host", "demo-box", "--suggest", "--min", "demo-vllm=10")
    assert list(out["not_planned"]) == ["demo-llama"] and "no memory share" in out["not_planned"]["demo-llama"]
    assert out["box"]["other_gib"] == 18.37  # 48.3 used now − (0.15 + 0.1) × 119.7: demo-llama is in there
    text = cli("plan", "--host", "demo-box", "--suggest", "--min", "demo-vllm=10")
    assert "demo-llama: not planned by share: its ledger rows record no memory share" in text
    assert "(the rest of the box, 18.37 GiB: used now, MemTotal − MemAvailable, less the engines' shares)" in text
