"""The card's "Last error": one sentence with its time, gone once the engine is up again, and kept
in the engine page's history."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from sparkops.alerts.models import AlertEvent
from sparkops.live.cards import engine_card_html, error_history, last_error

pytestmark = pytest.mark.django_db


def _fatal(at, message="CUDA error: an illegal instruction was encountered"):
    return {
        "time_us": str(int(at.timestamp() * 1e6)),
        "unit": "llama-side.service",
        "kernel": False,
        "signature": "cuda_illegal_instruction",
        "message": message,
    }


def test_a_poll_error_reads_as_a_sentence_with_its_time(fleet):
    llama = fleet["llama"]
    llama.status_changed_at = timezone.now().replace(hour=8, minute=41, second=13)
    assert last_error(llama, {"error": "/health: HTTP 503"}) == "At 08:41:13 UTC the poll failed: /health: HTTP 503."


def test_the_journals_fatal_line_of_this_death_wins_and_no_dict_reaches_the_card(fleet):
    llama = fleet["llama"]
    now = timezone.now()
    llama.status_changed_at = now
    old = _fatal(now - timedelta(hours=3), "an old crash")
    fresh = _fatal(now - timedelta(seconds=5))
    llama.latest = {"error": "connection refused", "fatal_lines": [old, fresh]}
    llama.save()
    sentence = last_error(llama, llama.latest)
    at = timezone.localtime(now - timedelta(seconds=5)).strftime("%H:%M:%S")
    assert sentence == f"At {at} UTC llama-side.service logged: CUDA error: an illegal instruction was encountered."
    html = engine_card_html(llama)
    assert sentence in html and "time_us" not in html and "{&#x27;" not in html
    llama.latest = {
        "error": "connection refused",
        "fatal_lines": [old],
    }  # only a line from long before: the poll's error
    assert last_error(llama, llama.latest).endswith("the poll failed: connection refused.")


def test_a_healthy_card_shows_no_error_and_the_engine_page_keeps_it(viewer_client, fleet):
    vllm, now = fleet["vllm"], timezone.now()
    vllm.latest = {"error": "", "fatal_lines": [_fatal(now - timedelta(minutes=20))]}
    vllm.save()
    AlertEvent.objects.create(
        rule="engine_down",
        severity="critical",
        state="resolved",
        engine=vllm,
        subject="vllm-main",
        message="vllm-main exited with status 0",
        cause="exit0_no_restart",
        started_at=now - timedelta(minutes=21),
        fired_at=now - timedelta(minutes=21),
        resolved_at=now - timedelta(minutes=15),
    )
    AlertEvent.objects.create(
        rule="unit_no_restart",
        severity="info",
        state="firing",
        engine=vllm,
        subject="vllm-main.service",
        message="advisory",
        started_at=now,
        fired_at=now,
    )
    assert last_error(vllm, vllm.latest) == ""
    page = viewer_client.get(reverse("engine-detail", args=["vllm-main"])).content.decode()
    card = page.split('id="engine-card-')[1].split("</article>")[0]
    assert "illegal instruction" not in card
    history = page.split('id="error-history"')[1].split("</section>")[0]
    assert "engine_down · exit0_no_restart" in history and "vllm-main exited with status 0" in history
    assert "CUDA error: an illegal instruction was encountered." in history and "advisory" not in history
    assert [r["what"] for r in error_history(vllm)] == ["journal", "engine_down · exit0_no_restart"]
