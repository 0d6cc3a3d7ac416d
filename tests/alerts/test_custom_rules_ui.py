"""The operator's own rules made on the rules page, by the CLI and by the API; refused with the
reason in each; exported and imported with the configuration (issue 51)."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from sparkops.alerts.models import CustomRule, Route

pytestmark = pytest.mark.django_db


def cli(*args):
    out = io.StringIO()
    call_command("alerts", "custom", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def routed(fleet):
    """ops-hook already routes engine_down, so choosing it adds a route for the custom rule."""
    Route.objects.create(channel=fleet["webhook"], rule="engine_down", min_severity="info")
    return fleet


PAGE_FORM = {
    "name": "kv-high",
    "scope": "engine",
    "engine": "vllm-main",
    "host": "",
    "metric": "kv_cache_usage",
    "comparator": ">",
    "threshold": "0.95",
    "for_": "5m",
    "severity": "warning",
    "channels": ["ops-hook"],
}


def test_the_page_adds_a_rule_shown_with_the_built_ins_and_removes_it(routed, admin_client_):
    response = admin_client_.post("/alerts/rules/custom/new", PAGE_FORM)
    assert response.status_code == 302
    rule = CustomRule.objects.get()
    assert (rule.engine, rule.metric, rule.comparator, rule.threshold, rule.for_s) == (
        routed["vllm"],
        "kv_cache_usage",
        ">",
        0.95,
        300,
    )
    assert Route.objects.filter(rule="custom.kv-high", channel=routed["webhook"]).exists()
    page = admin_client_.get("/alerts/rules/").content.decode()
    assert 'id="rule-custom.kv-high"' in page and "kv_cache_usage of vllm-main &gt; 0.95 for 300 s" in page
    assert 'id="rule-kv_saturated"' in page  # the built-ins on the same page
    assert admin_client_.post("/alerts/rules/custom/kv-high/remove").status_code == 302
    assert not CustomRule.objects.exists() and not Route.objects.filter(rule="custom.kv-high").exists()


def test_the_page_refuses_a_bad_rule_at_its_field_and_keeps_the_input(routed, admin_client_):
    response = admin_client_.post("/alerts/rules/custom/new", {**PAGE_FORM, "metric": "kv_usage", "threshold": "lots"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "unknown engine metric &#x27;kv_usage&#x27;" in page and "&#x27;lots&#x27; is not a number" in page
    assert 'value="kv_usage"' in page and "<details open>" in page
    assert not CustomRule.objects.exists()


def test_a_viewer_cannot_add_one(routed, viewer_client):
    assert viewer_client.post("/alerts/rules/custom/new", PAGE_FORM).status_code == 403
    assert not CustomRule.objects.exists()


def test_the_cli_adds_lists_and_removes(routed):
    out = cli(
        "add",
        "kv-high",
        "--engine",
        "vllm-main",
        "--metric",
        "kv_cache_usage",
        "--above",
        "0.95",
        "--for",
        "5m",
        "--channel",
        "ops-hook",
    )
    assert out.strip() == "added custom.kv-high: kv_cache_usage of vllm-main > 0.95 for 300 s → warning"
    assert "custom.kv-high" in cli("list")
    [listed] = json.loads(cli("list", "--json"))
    assert listed["channels"] == ["ops-hook"] and listed["for"] == 300
    cli("add", "gpu-hot", "--host", "", "--metric", "gpu0.temperature_c", "--at-or-above", "85")
    assert CustomRule.objects.get(name="gpu-hot").scope == "host"
    assert cli("remove", "kv-high").strip() == "removed custom.kv-high"
    assert list(CustomRule.objects.values_list("name", flat=True)) == ["gpu-hot"]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--metric", "kv_usage", "--above", "1"], "metric: unknown engine metric 'kv_usage'"),
        (["--metric", "kv_cache_usage", "--above", "ninety"], "threshold: 'ninety' is not a number"),
        (["--metric", "kv_cache_usage", "--above", "1", "--for", "a while"], "for: 'a while' is not a duration"),
    ],
)
def test_the_cli_refuses_with_the_reason(routed, args, reason):
    with pytest.raises(CommandError, match=reason):
        cli("add", "kv-high", *args)
    with pytest.raises(CommandError, match=r"U\+001B \(ESCAPE\)"):
        cli("add", "kv\x1bhigh", "--metric", "kv_cache_usage", "--above", "1")
    assert not CustomRule.objects.exists()


def test_the_api_creates_lists_refuses_and_deletes(routed, admin_client_):
    body = {
        "name": "kv-high",
        "engine": "vllm-main",
        "metric": "kv_cache_usage",
        "comparator": ">",
        "threshold": 0.95,
        "for": 300,
        "channels": ["ops-hook"],
    }
    created = admin_client_.post("/api/rules/custom/", json.dumps(body), content_type="application/json")
    assert created.status_code == 201 and created.json()["channels"] == ["ops-hook"]
    listed = admin_client_.get("/api/rules/custom/").json()["custom_rules"]
    assert [(r["name"], r["metric"], r["threshold"], r["for"]) for r in listed] == [
        ("kv-high", "kv_cache_usage", 0.95, 300)
    ]
    bad = admin_client_.post(
        "/api/rules/custom/", json.dumps({**body, "name": "other", "threshold": "x"}), content_type="application/json"
    )
    assert bad.status_code == 400 and bad.json()["fields"] == {"threshold": ["'x' is not a number"]}
    assert admin_client_.delete("/api/rules/custom/kv-high/").json() == {"removed": "kv-high"}
    assert admin_client_.delete("/api/rules/custom/kv-high/").status_code == 404
    assert not CustomRule.objects.exists()


def test_the_api_refuses_a_form_post_or_a_body_that_is_not_one_rule(routed, admin_client_):
    form = admin_client_.post("/api/rules/custom/", {"name": "kv-high"})
    assert form.status_code == 415 and "send the rule as JSON" in form.json()["error"]
    junk = admin_client_.post("/api/rules/custom/", "{not json", content_type="application/json")
    assert junk.status_code == 400 and "not JSON" in junk.json()["error"]
    listed = admin_client_.post("/api/rules/custom/", "[1, 2]", content_type="application/json")
    assert listed.status_code == 400 and "one rule definition" in listed.json()["error"]
    assert not CustomRule.objects.exists()


def test_the_api_writes_need_an_admin(routed, operator_client):
    response = operator_client.post("/api/rules/custom/", "{}", content_type="application/json")
    assert response.status_code == 403
    assert operator_client.get("/api/rules/custom/").json() == {"custom_rules": []}


def test_export_then_import_round_trips(routed, tmp_path):
    cli(
        "add",
        "kv-high",
        "--engine",
        "vllm-main",
        "--metric",
        "kv_cache_usage",
        "--above",
        "0.95",
        "--for",
        "5m",
        "--severity",
        "critical",
        "--channel",
        "ops-hook",
    )
    cli("add", "gpu-hot", "--host", "spark-1", "--metric", "gpu0.temperature_c", "--at-or-above", "85")
    exported = cli("export")
    (tmp_path / "rules.json").write_text(exported)
    for name in ("kv-high", "gpu-hot"):
        cli("remove", name)
    assert not Route.objects.filter(rule__startswith="custom.").exists()
    assert cli("import", str(tmp_path / "rules.json")).strip() == "imported 2 custom rules"
    assert cli("export") == exported  # the same rules, channels included
    assert Route.objects.filter(rule="custom.kv-high", channel=routed["webhook"]).exists()


def test_an_import_with_one_bad_rule_imports_nothing(routed, tmp_path):
    rules = [
        {"name": "fine", "metric": "kv_cache_usage", "comparator": ">", "threshold": 0.9},
        {"name": "broken", "metric": "no_such_metric", "comparator": ">", "threshold": 1},
    ]
    (tmp_path / "rules.json").write_text(json.dumps({"custom_rules": rules}))
    with pytest.raises(CommandError, match=r"custom rule 2 \(broken\): metric: unknown engine metric"):
        cli("import", str(tmp_path / "rules.json"))
    assert not CustomRule.objects.exists()


def test_disable_and_enable_from_the_page_and_the_cli(routed, admin_client_):
    cli("add", "kv-high", "--engine", "vllm-main", "--metric", "kv_cache_usage", "--above", "0.95")
    assert admin_client_.post("/alerts/rules/custom/kv-high/switch", {"enabled": "0"}).status_code == 302
    assert CustomRule.objects.get().enabled is False
    page = admin_client_.get("/alerts/rules/").content.decode()
    assert "disabled" in page and ">Enable</button>" in page
    assert cli("enable", "kv-high").strip() == "custom.kv-high enabled"
    assert CustomRule.objects.get().enabled is True
    with pytest.raises(CommandError, match="no custom rule named 'nope'"):
        cli("disable", "nope")


def test_the_channels_page_offers_a_custom_rule_key_to_route(routed, admin_client_):
    cli("add", "kv-high", "--metric", "kv_cache_usage", "--above", "0.95")
    page = admin_client_.get("/alerts/channels/").content.decode()
    assert '<option value="custom.kv-high">custom.kv-high</option>' in page
