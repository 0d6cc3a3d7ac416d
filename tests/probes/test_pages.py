"""Pages: the probe list, the form (cron, bad input kept with its message), a run's result table, a
profile's trend and needle table, the engine page's contract reading, and who may write."""

import json

import pytest
from django.urls import reverse

from sparkops.probes.models import ProbeProfile, ProbeRun

pytestmark = pytest.mark.django_db

NEEDLE_RESULT = {
    "kind": "needle",
    "depths": [10, 50, 90],
    "decoys": 2,
    "counted_by": "tokenize",
    "rows": [
        {
            "corpus": "lighthouse",
            "control": False,
            "tokens": 16327,
            "prompt_tokens": 16345,
            "seconds_per_case": 29.1,
            "cells": {
                "10": {"verdict": "HIT", "text": "HIT 3/3", "counts": {"HIT": 3}, "errors": {}},
                "50": {"verdict": "DECOY", "text": "DECOY 2/3", "counts": {"DECOY": 2, "HIT": 1}, "errors": {}},
                "90": {"verdict": "HIT", "text": "HIT 3/3", "counts": {"HIT": 3}, "errors": {}},
            },
        }
    ],
    "passed": False,
    "headline": "HIT DECOY HIT",
}


def _run(engine, profile=None, **kw):
    defaults = {"kind": "needle", "params_hash": profile.params_hash if profile else "h", "status": "done"}
    return ProbeRun.objects.create(engine=engine, profile=profile, **{**defaults, **kw})


def test_index_lists_probes_and_runs(viewer_client, fleet):
    profile = ProbeProfile.objects.create(name="needle-16k", engine=fleet["vllm"], kind="needle", tokens=16384)
    _run(fleet["vllm"], profile, result=NEEDLE_RESULT, headline="HIT DECOY HIT", passed=False)
    html = viewer_client.get(reverse("probes:index")).content.decode()
    assert "needle-16k" in html and "HIT DECOY HIT" in html and profile.params_hash in html
    assert reverse("probes:profile-new") not in html  # viewers get no write links
    assert viewer_client.get(reverse("probes:profile-new")).status_code == 403


def test_operator_creates_a_scheduled_probe(operator_client, fleet):
    data = {
        "name": "nightly-needle",
        "engine": fleet["vllm"].pk,
        "kind": "needle",
        "tokens": 16384,
        "depths": "10,50,90",
        "decoys": 2,
        "corpus": "lighthouse",
        "control_corpus": "orchard",
        "sampling": "server",
        "thinking": "server",
        "reps": 3,
        "timeout_s": 600,
        "cron": "0 4 * * *",
        "schedule_enabled": "on",
    }
    resp = operator_client.post(reverse("probes:profile-new"), data)
    profile = ProbeProfile.objects.get(name="nightly-needle")
    assert resp.status_code == 302 and profile.schedule.task == "probe.profile_scheduled"
    assert json.loads(profile.schedule.args) == [profile.pk] and profile.schedule.crontab.hour == "4"
    assert (
        "<code>0 4 * * *</code>" in operator_client.get(reverse("probes:profile", args=[profile.pk])).content.decode()
    )


@pytest.mark.parametrize(
    "field,value,message",
    [("depths", "10,150", "between 0 and 100"), ("reps", "4", "odd number"), ("cron", "nightly", "five cron fields")],
)
def test_bad_input_rerenders_with_the_message_and_saves_nothing(operator_client, fleet, field, value, message):
    data = {
        "name": "p",
        "engine": fleet["vllm"].pk,
        "kind": "needle",
        "tokens": 4096,
        "depths": "10,50,90",
        "decoys": 2,
        "corpus": "lighthouse",
        "control_corpus": "orchard",
        "sampling": "server",
        "thinking": "server",
        "reps": 3,
        "timeout_s": 600,
        field: value,
    }
    resp = operator_client.post(reverse("probes:profile-new"), data)
    assert resp.status_code == 200 and message in resp.content.decode()
    assert ProbeProfile.objects.count() == 0


def test_run_page_shows_the_needle_table(viewer_client, fleet):
    run = _run(fleet["vllm"], result=NEEDLE_RESULT, headline="HIT DECOY HIT", passed=False)
    html = viewer_client.get(reverse("probes:run", args=[run.pk])).content.decode()
    assert 'class="cell-decoy"' in html and "DECOY 2/3" in html and "16327" in html and "29.1" in html


def test_profile_page_trend_and_table(viewer_client, fleet):
    profile = ProbeProfile.objects.create(name="n", engine=fleet["vllm"], kind="needle")
    _run(fleet["vllm"], profile, result=NEEDLE_RESULT, headline="HIT DECOY HIT", passed=False, regression=True)
    resp = viewer_client.get(reverse("probes:profile", args=[profile.pk]))
    trend = resp.context["trend"]
    assert trend["score"] == [pytest.approx(2 / 3)] and trend["regression"] == [True]
    assert 'id="needle-table"' in resp.content.decode()


def test_engine_page_shows_the_contract(viewer_client, fleet):
    engine = fleet["vllm"]
    url = reverse("engine-detail", args=[engine.name])
    assert "sparkops probe run --engine" in viewer_client.get(url).content.decode()
    _run(
        engine,
        kind="contract",
        result={
            "window": 32768,
            "cases": {
                "prompt+max_tokens": {"behaviour": "clamped", "completion_tokens": 48, "finish_reason": "length"},
                "prompt alone": {
                    "behaviour": "rejected",
                    "http_status": 400,
                    "message": "maximum context length is 32768",
                },
            },
        },
    )
    html = viewer_client.get(url).content.decode()
    assert 'finish_reason "length" after 48 tokens' in html and "HTTP 400" in html


def test_thinking_run_page_lists_the_arms_in_the_order_sent(viewer_client, fleet):
    arms = {
        "off": {"reasoning": 0, "content_chars": 300, "n": 3},
        "off+effort": {"reasoning": 350, "content_chars": 0, "n": 3},
        "on+low": {"reasoning": 40, "content_chars": 50, "n": 3},
        "on+high": {"reasoning": 200, "content_chars": 60, "n": 3},
    }
    result = {"arms": arms, "verdict": "inverted", "findings": ["inverted"]}
    run = _run(fleet["vllm"], kind="thinking", result=result, passed=False)
    html = viewer_client.get(reverse("probes:run", args=[run.pk])).content.decode()
    positions = [html.index(f"<td>{arm}</td>") for arm in arms]
    assert positions == sorted(positions) and "<strong>inverted</strong>" in html
