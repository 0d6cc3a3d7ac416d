"""Issue 51, rough edge 4: an alert's page heads with the cause it has now (what "Now" and the timeline
say), not the one it fired with; the card's excerpt of a long message keeps the fatal line itself; and
the host's audit page offers "Preview the drop-in" for a pair's finding (cold_starts_serialized) as
each engine's audit page does."""

import pytest
from django.template.loader import render_to_string

from sparkops.alerts.models import AlertEvent
from sparkops.alerts.services import external_alert_fire
from sparkops.audit.base import Result

pytestmark = pytest.mark.django_db

FATAL = "CUDA error: an illegal instruction was encountered (cudaErrorIllegalInstruction) at csrc/attention.cu:412"
LONG = (
    "llama-side is down: the main process exited with status 0 under Restart=on-failure, so systemd will not "
    "start it again; the unit stays inactive until someone restarts it by hand or the box reboots."
    f" Last fatal line: {FATAL}"
)


def _changed_cause(fleet) -> AlertEvent:
    event = external_alert_fire(
        rule="engine_down",
        severity="critical",
        engine=fleet["llama"],
        subject="llama-side",
        message=LONG,
        cause="fatal_no_restart",
    )
    latest = {"cause": "exit0_no_restart", "message": "llama-side exited with status 0", "details": {}}
    AlertEvent.objects.filter(pk=event.pk).update(details={**(event.details or {}), "latest": latest})
    event.refresh_from_db()
    return event


def test_the_alert_page_heads_with_the_cause_it_has_now(viewer_client, fleet):
    event = _changed_cause(fleet)
    html = viewer_client.get(f"/alerts/{event.pk}/").content.decode()
    cause = html[html.index('data-field="cause">') :].split("</dd>")[0]
    assert cause.startswith('data-field="cause">exit0_no_restart'), cause
    assert "(fired as fatal_no_restart)" in cause
    assert '<dd class="alert-latest">llama-side exited with status 0</dd>' in html


def test_the_card_excerpt_keeps_the_fatal_line(viewer_client, fleet):
    _changed_cause(fleet)
    html = viewer_client.get("/").content.decode()
    card = html[html.index(f'id="engine-card-{fleet["llama"].pk}"') :]
    alert = card[card.index('data-field="alert"') :].split("</p>")[0]
    assert f"Last fatal line: <code>{FATAL}</code>" in alert, alert
    assert " · exit0_no_restart:" in alert and "fatal_no_restart" not in alert
    assert len(alert) < len(LONG) + 200  # still an excerpt: the sentence before it gave way


def test_the_host_audit_links_the_drop_in_of_a_pairs_finding(fleet):
    pair = Result(
        "cold_starts_serialized", "Cold starts one at a time", "vllm-main + llama-side", "fail", "both at boot"
    )
    host_page = render_to_string("dashboard/audit.html", {"host": fleet["host"], "engine": None, "results": [pair]})
    assert 'href="/engines/vllm-main/audit/fix/">vllm-main</a>' in host_page
    assert 'href="/engines/llama-side/audit/fix/">llama-side</a>' in host_page and "Preview the drop-in" in host_page
    engine_page = render_to_string(
        "dashboard/audit.html", {"host": fleet["host"], "engine": fleet["vllm"], "results": [pair]}
    )
    assert 'href="/engines/vllm-main/audit/fix/">Preview the drop-in</a>' in engine_page
    passed = Result("cold_starts_serialized", "Cold starts", "vllm-main + llama-side", "pass", "one at a time")
    assert "unit-fix-link" not in render_to_string(
        "dashboard/audit.html", {"host": fleet["host"], "engine": None, "results": [passed]}
    )
