"""Issue 51's rough edges (item 5), the server-side ones: the engines list reads ISO dates like every
other page, the top menu reaches the planner and the hosts, a page that is not there is a styled 404
inside the app's frame, `bench list` prints rates as the pages do, `up --help` counts the demo's
engines from the simulator's own list, `alerts list --json` carries when an alert resolved, and a
benchmark profile with no runs says so instead of drawing empty charts."""

import json
import re
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command

from dashboard.models import Engine

pytestmark = pytest.mark.django_db
POLLED = datetime(2026, 12, 6, 18, 13, 7, tzinfo=UTC)


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_the_engines_list_reads_iso_dates(viewer_client, fleet):
    Engine.objects.filter(pk=fleet["vllm"].pk).update(last_poll_at=POLLED)
    html = viewer_client.get("/engines/").content.decode()
    assert '<time datetime="2026-12-06T18:13:07+00:00">2026-12-06 18:13:07</time>' in html
    assert not re.search(r"\b(a\.m\.|p\.m\.)", html), "a Django default date on /engines/"


def test_the_top_menu_has_planner_and_hosts_and_hosts_lists_every_box(viewer_client, fleet):
    html = viewer_client.get("/").content.decode()
    nav = html[html.index('<nav class="mainnav">') : html.index("</nav>")]
    assert '<a href="/planner/"' in nav and ">Planner</a>" in nav
    assert '<a href="/hosts/"' in nav and ">Hosts</a>" in nav
    page = viewer_client.get("/hosts/").content.decode()
    assert f'<a href="/hosts/{fleet["host"].name}/">{fleet["host"].name}</a>' in page
    assert '<a href="/engines/vllm-main/">vllm-main</a>' in page and "/planner/spark-1/" in page
    assert 'class="active">Hosts</a>' in page


def test_a_missing_page_is_a_styled_404_with_the_menu(viewer_client, fleet, settings):
    settings.DEBUG = False
    response = viewer_client.get("/no/such/page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "css/sparkops" in html and '<nav class="mainnav">' in html  # the app's frame and stylesheet
    assert 'id="not-found"' in html and "<code>/no/such/page/</code>" in html
    missing_engine = viewer_client.get("/engines/no-such-engine/")
    assert missing_engine.status_code == 404 and 'id="not-found"' in missing_engine.content.decode()


def test_bench_list_rounds_the_decode_rate_and_json_keeps_it(fleet):
    from sparkops.benchmarks.models import Profile, Run

    profile = Profile.objects.create(name="decode-1k", engine=fleet["vllm"])
    stats = {"decode_tokens_per_s": {"n": 3, "median": 39.996759246712124, "min": 39.0, "max": 41.0}}
    Run.objects.create(
        engine=fleet["vllm"], profile=profile, params_hash=profile.params_hash, status="done", stats=stats
    )
    line = run("bench", "list").strip()
    assert "decode 40.0 tok/s" in line and "39.99675" not in line, line
    assert json.loads(run("bench", "list", "--json"))[0]["last_run"]["decode_median"] == 39.996759246712124


def test_up_help_counts_the_demo_engines_from_the_simulators_list():
    from dashboard.management.commands.up import Command
    from simulator.cli import DEFAULT_ENGINES

    parser = Command().create_parser("sparkops", "up")
    text = next(a.help for a in parser._actions if "--demo" in a.option_strings)
    assert len(DEFAULT_ENGINES) == 3
    assert "also run three simulated engines (demo-vllm, demo-llama, smoke-8b) and watch them" in text, text
    assert "two simulated" not in parser.format_help()


def test_alerts_list_json_has_the_resolved_time(fleet):
    from sparkops.alerts.services import external_alert_fire, external_alert_resolve

    kw = {"engine": fleet["llama"], "subject": "llama-side"}
    external_alert_fire(rule="engine_down", severity="critical", message="down", **kw)
    resolved = external_alert_resolve(rule="engine_down", **kw)
    external_alert_fire(rule="kv_saturated", severity="warning", message="full", engine=fleet["vllm"], subject="x")
    rows = {r["rule"]: r for r in json.loads(run("alerts", "list", "--state", "", "--json"))}
    assert rows["engine_down"]["resolved_at"] == resolved.resolved_at.isoformat()
    assert rows["kv_saturated"]["resolved_at"] is None
    assert {"id", "rule", "state", "started_at", "acknowledged"} <= set(rows["engine_down"])  # the keys it had


def test_a_new_profile_says_no_runs_yet_instead_of_empty_charts(operator_client, fleet):
    from sparkops.benchmarks.models import Profile

    profile = Profile.objects.create(name="fresh", engine=fleet["vllm"])
    html = operator_client.get(f"/bench/profiles/{profile.pk}/").content.decode()
    assert 'id="trend-empty"' in html and "No runs yet" in html
    assert 'id="trend-decode"' not in html and 'id="bench-trend"' not in html
