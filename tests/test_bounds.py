"""Absurd input is refused at the field with a clear message, and nothing changes (issue 19, item 6)."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from sparkops.alerts.models import AlertRule
from sparkops.alerts.services import rule_update
from sparkops.benchmarks.forms import ProfileForm
from sparkops.benchmarks.models import Profile
from sparkops.changelog.models import Correction, Entry

pytestmark = pytest.mark.django_db


def _profile_post(fleet, **over):
    data = {
        "name": "decode-1k",
        "engine": fleet["vllm"].pk,
        "workload": "essay",
        "instruction": "Continue.",
        "depth": 1024,
        "mode": "cold",
        "output_tokens": 512,
        "sampling": "server",
        "sampling_params": "",
        "thinking": "server",
        "reps": 3,
        "concurrency": 1,
        "timeout_s": 600,
        "cron": "",
        "schedule_enabled": "on",
    }
    return {**data, **over}


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("output_tokens", 99_999_999_999, "less than or equal to 131072"),
        ("concurrency", 100_000, "less than or equal to 256"),
        ("timeout_s", 0, "greater than or equal to 1"),
        ("depth", 10_000_000, "less than or equal to 1048576"),
        ("reps", 99, "less than or equal to 51"),
        ("name", "x" * 307, "at most 63 characters"),
        ("instruction", "y" * 5000, "at most 4000 characters"),
    ],
)
def test_a_profile_out_of_bounds_is_refused_at_its_field(operator_client, fleet, field, value, message):
    depth = {"depth": 0} if field == "concurrency" else {}  # depth > 0 with concurrency > 1 is refused anyway
    response = operator_client.post(reverse("bench:profile-new"), _profile_post(fleet, **{field: value, **depth}))
    assert response.status_code == 200 and not Profile.objects.exists()
    form = response.context["form"]
    assert list(form.errors) == [field], form.errors
    assert message in form.errors[field][0]
    assert str(value)[:20] in response.content.decode()  # the input is kept


def test_the_profile_form_tells_the_browser_its_bounds(fleet):
    form = ProfileForm()
    assert 'max="131072"' in str(form["output_tokens"]) and 'min="1"' in str(form["output_tokens"])
    assert 'min="1"' in str(form["timeout_s"]) and 'max="256"' in str(form["concurrency"])
    assert 'maxlength="63"' in str(form["name"]) and 'maxlength="4000"' in str(form["instruction"])


def test_a_sane_profile_still_saves(operator_client, fleet):
    response = operator_client.post(reverse("bench:profile-new"), _profile_post(fleet))
    assert response.status_code == 302 and Profile.objects.get().output_tokens == 512


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("p_failures", 0, "greater than or equal to 1"),
        ("p_activating_budget_s", 10**9, "less than or equal to 2592000"),
        ("renotify_s", 5, "60 s or more"),
    ],
)
def test_a_rule_edit_out_of_bounds_shows_the_error_at_the_field_and_keeps_the_input(
    admin_client_, field, value, message
):
    post = {"enabled": "on", "severity": "", "p_failures": 2, "p_activating_budget_s": 600, field: value}
    response = admin_client_.post(reverse("alerts:rule-edit", args=["engine_down"]), post)
    assert response.status_code == 400
    page = response.content.decode()
    row = page.split('id="rule-engine_down"')[1].split("</tr>")[0]
    assert message in row and f'value="{value}"' in row
    assert not AlertRule.objects.filter(key="engine_down").exists()


def test_rule_settings_from_the_command_line_are_bounded_too(db):
    with pytest.raises(ValidationError, match="failures must be between 1 and 1000000, not 0"):
        rule_update(key="engine_down", params={"failures": 0})
    with pytest.raises(ValidationError, match=r"kv usage|usage_pct must be between 0 and 100"):
        rule_update(key="kv_saturated", params={"usage_pct": 150})
    with pytest.raises(ValidationError, match="re-notify every 60 s to 7 days"):
        rule_update(key="engine_down", renotify_s=10)
    assert not AlertRule.objects.exists()


def test_a_correction_older_than_its_entry_is_refused(operator_client, fleet):
    entry = Entry.objects.create(effective_at=timezone.now() - timedelta(days=1), kind="claim", title="57K cliff")
    url = reverse("changelog:correct", args=[entry.pk])
    for when, message in (
        ("1999-06-01T10:00", "dated 1999-06-01 is before 2000: check the year"),
        (
            (entry.effective_at - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M"),
            "cannot be older than the entry it corrects",
        ),
    ):
        response = operator_client.post(
            url, {"corrected_at": when, "target": "entry", "mark": "", "text_md": "It was an HTTP 400.", "evidence": ""}
        )
        assert response.status_code == 400 and not Correction.objects.exists()
        assert message in response.content.decode()
    later = (entry.effective_at + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    operator_client.post(
        url, {"corrected_at": later, "target": "entry", "mark": "", "text_md": "It was an HTTP 400.", "evidence": ""}
    )
    assert Correction.objects.count() == 1


def test_an_entry_dated_before_2000_is_refused(operator_client, fleet):
    response = operator_client.post(
        reverse("changelog:new"),
        {
            "effective_at": "1999-06-01T10:00",
            "kind": "flag_change",
            "title": "--max-num-seqs 8 -> 16",
            "form-TOTAL_FORMS": 0,
            "form-INITIAL_FORMS": 0,
        },
    )
    assert not Entry.objects.exists()
    assert "before 2000: check the year" in response.content.decode()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--output-tokens", "99999999999"], "--output-tokens: Ensure this value is less than or equal to 131072"),
        (["--concurrency", "100000", "--depth", "0"], "--concurrency: Ensure this value is less than or equal to 256"),
        (["--timeout", "0"], "--timeout: Ensure this value is greater than or equal to 1"),
        (["--reps", "4"], "--reps: Use an odd number of repetitions"),
        (["--depth", "10000000"], "--depth: Ensure this value is less than or equal to 1048576"),
        (["--reps", "x"], "argument --reps: 'x' is not a whole number"),
        (["--output-tokens", "-3"], "argument --output-tokens: '-3' must not be negative"),
    ],
)
def test_an_ad_hoc_cli_run_is_held_to_the_profile_bounds(fleet, args, message):
    from django.core.management import CommandError, call_command

    from sparkops.benchmarks.models import Run

    with pytest.raises(CommandError) as caught:
        call_command("bench", "run", "--engine", fleet["vllm"].name, *args)
    assert message in str(caught.value)
    assert not Run.objects.exists()  # refused before a run was created


@pytest.mark.parametrize(
    "text, message",
    [
        (f"## 2026-08-20 · {'t' * 5000}\nKind: decision\n", "line 1: the title is 5,000 characters; at most 200 fit"),
        (
            f"## 2026-08-20 · window\nFlag: --max-model-len: 131072 → {'9' * 600}\n",
            "line 2: a flag value is 600 characters; at most 500 fit",
        ),
    ],
)
def test_the_import_path_holds_the_forms_lengths(fleet, tmp_path, text, message):
    from django.core.management import CommandError, call_command

    log = tmp_path / "log.md"
    log.write_text(text)
    with pytest.raises(CommandError, match=message):
        call_command("changelog", "import", str(log))
    assert not Entry.objects.exists()
