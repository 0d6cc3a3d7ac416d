"""The engine page's "request contract (live)" panel, from the readings the real poller stored."""

import pytest
from django.urls import reverse

from dashboard.models import Engine
from tests.polls import poll

pytestmark = [pytest.mark.django_db(transaction=True)]


def _poll_both(engines):
    return poll(*Engine.objects.select_related("host").filter(pk__in=[e.pk for e in engines.values()]).order_by("pk"))


def _panel(client, name):
    page = client.get(reverse("engine-detail", args=[name])).content.decode()
    return page.split('id="contract-live"')[1].split("</section>")[0]


def test_vllm_panel_shows_shares_the_edge_the_cut_and_its_journal(sim, engines, viewer_client, settings):
    settings.SPARKOPS_CONTRACT_WINDOW_S = settings.SPARKOPS_CONTRACT_CUT_WINDOW_S = 600.0  # all three polls
    _poll_both(engines)
    sim.traffic("ctr-vllm", 8, finish_reason={"stop": 6, "length": 2}, prompt_tokens=30000)
    _poll_both(engines)  # 10 s requests ending beside the cut ones would blur their duration by 10 s
    sim.traffic("ctr-vllm", 2, finish_reason="abort", e2e_s=600.01)
    sim.traffic("ctr-vllm", 1, status=500)
    _poll_both(engines)
    sim.traffic("ctr-vllm", 1, finish_reason="abort", e2e_s=600.0)
    _poll_both(engines)
    panel = _panel(viewer_client, "ctr-vllm")
    length_row = panel.split('data-reason="length"')[1].split("</tr>")[0]
    assert "<td>2</td>" in length_row and "18 %" in length_row and "contract-bad" in panel
    assert "8 of 11 prompts over 20,000 tokens (61 % of the 32,768-token window)" in panel
    assert "3 requests ended at 600 s" in panel
    assert "<strong>0</strong> HTTP 400, <strong>1</strong> HTTP 500" in panel


def test_llamacpp_panel_says_what_it_cannot_see_and_quotes_the_peg_native_line(sim, engines, viewer_client):
    _poll_both(engines)
    sim.traffic("ctr-llama", 2, status=400, prompt_tokens=9000)
    sim.traffic("ctr-llama", 1, peg_native="<think>")
    _poll_both(engines)
    panel = _panel(viewer_client, "ctr-llama")
    assert "publishes no finish reasons, prompt-length or end-to-end latency histogram" in panel
    assert "<strong>2</strong> HTTP 400, <strong>1</strong> HTTP 500, <strong>1</strong> peg-native" in panel
    assert "W common_chat_peg_parse: unparsed peg-native output: &lt;think&gt;" in panel


def test_an_engine_never_polled_has_an_empty_panel(fleet, viewer_client):
    assert "No reading yet." in _panel(viewer_client, "vllm-main")
