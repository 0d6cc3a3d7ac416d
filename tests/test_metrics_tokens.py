"""/metrics (SparkOps' own readings for Prometheus) and read-only API tokens: the exposition
parses with prometheus_client's own parser and holds the engine readings of a real poll;
no token, a wrong one or a revoked one is 401; a token reads /api/engines/ and can write
nothing; `sparkops token` creates (shown once, stored hashed), lists and revokes."""

import hashlib
import io
import json
import re
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from dashboard.models import Engine
from dashboard.tokens.models import ApiToken
from sparkops.alerts.models import AlertEvent, Delivery
from tests.polls import poll
from tests.simulator.conftest import engine_factory  # noqa: F401  (fixture)
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
GRAFANA = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "sparkops.json"


def create_token(user, *extra):
    out = io.StringIO()
    call_command("token", "create", user.username, *(extra or ("--name", "test")), stdout=out)
    return out.getvalue().rstrip("\n").splitlines()[-1]


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(fams, family, name=None, **labels):
    found = [
        s
        for s in fams[family].samples
        if (name is None or s.name == name) and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (family, labels, fams[family].samples)
    return found[0].value


@pytest.fixture
def polled(fleet, engine_factory, settings):
    """fleet's vLLM engine pointed at a simulated vLLM with traffic, polled until a reading has its
    rates and latency quantiles (they need two polls with traffic served between them: polled again
    as soon as the last one ended, not after a sleep)."""
    settings.SPARKOPS_HOST_NAME = "spark-1"
    sim = engine_factory(kind="vllm", name="vllm-main", background_rps=20.0)
    engine = fleet["vllm"]
    Engine.objects.filter(pk=engine.pk).update(url=sim.url)
    engine.refresh_from_db()
    poll(engine)
    rated = ("generation_tokens_per_s", "prompt_tokens_per_s", "ttft_p50_s", "itl_p50_s")
    assert wait_for(lambda: all(poll(engine)[0].get(key) for key in rated), timeout=30, step=0.05)
    return fleet


def test_metrics_parse_and_hold_the_engine_readings(polled, viewer, client):
    fleet = polled
    event = AlertEvent.objects.create(
        rule="engine_down",
        severity="critical",
        state="firing",
        engine=fleet["llama"],
        host=fleet["host"],
        subject="llama-side down",
        message="down",
        started_at=timezone.now(),
        fired_at=timezone.now(),
    )
    Delivery.objects.create(
        event=event,
        channel=fleet["webhook"],
        transition="firing",
        idempotency_key="k1",
        next_attempt_at=timezone.now(),
        created_at=timezone.now(),
    )
    response = client.get("/metrics", headers=bearer(create_token(viewer, "--name", "prometheus")))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    fams = families(response.content.decode())

    vllm = {"engine": "vllm-main", "kind": "vllm", "host": "spark-1"}
    llama = {"engine": "llama-side", "kind": "llamacpp", "host": "spark-1"}
    assert sample(fams, "sparkops_engine_up", **vllm) == 1.0
    assert sample(fams, "sparkops_engine_up", **llama) == 0.0
    assert sample(fams, "sparkops_engine_status", **llama, status="down") == 1.0
    assert sample(fams, "sparkops_engine_status", **llama, status="up") == 0.0
    assert sample(fams, "sparkops_engine_generation_tokens_per_second", **vllm) > 0
    assert sample(fams, "sparkops_engine_prompt_tokens_per_second", **vllm) > 0
    assert 0 <= sample(fams, "sparkops_engine_kv_cache_usage_ratio", **vllm) <= 1
    assert sample(fams, "sparkops_engine_kv_pool_tokens", **vllm) == 766464
    assert 0.5 < sample(fams, "sparkops_engine_prefix_cache_hit_ratio", **vllm) <= 1
    for family in ("sparkops_engine_time_to_first_token_seconds", "sparkops_engine_inter_token_latency_seconds"):
        assert sample(fams, family, **vllm, quantile="0.5") <= sample(fams, family, **vllm, quantile="0.95")
    latest = Engine.objects.get(name="vllm-main").latest
    assert sample(fams, "sparkops_engine_generation_tokens_per_second", **vllm) == latest["generation_tokens_per_s"]
    assert sample(fams, "sparkops_engine_last_poll_timestamp_seconds", **vllm) > time.time() - 60
    assert sample(fams, "sparkops_host_memory_available_bytes", host="spark-1") > 0
    assert sample(fams, "sparkops_host_last_report_timestamp_seconds", host="spark-1") > time.time() - 60
    assert sample(fams, "sparkops_alerts_firing", rule="engine_down", severity="critical") == 1
    assert sample(fams, "sparkops_outbox_backlog", channel="ops-hook", kind="webhook") == 1
    assert sample(fams, "sparkops_outbox_backlog", channel="ops-mail", kind="email") == 0
    assert sample(fams, "sparkops_info", name="sparkops_info")  # carries the version label
    assert "process_cpu_seconds_total" not in fams  # only SparkOps' readings, not the web process'


def test_metrics_refuses_a_missing_wrong_or_revoked_token(viewer, client):
    assert client.get("/metrics").status_code == 401
    for header in ("Bearer spk_wrong", "Bearer ", "Basic dmVyYTpwdw==", "spk_no_scheme"):
        response = client.get("/metrics", headers={"Authorization": header})
        assert response.status_code == 401, header
        assert response["WWW-Authenticate"].startswith("Bearer")
    token = create_token(viewer)
    assert client.get("/metrics", headers=bearer(token)).status_code == 200
    ApiToken.objects.get(user=viewer).revoke()
    assert client.get("/metrics", headers=bearer(token)).status_code == 401
    assert client.get("/api/engines/", headers=bearer(token)).status_code == 401
    viewer.is_active = False
    viewer.save()
    assert client.get("/metrics", headers=bearer(create_token_unchecked(viewer))).status_code == 401


def create_token_unchecked(user):
    return ApiToken.issue(user, name="test")[1]


def test_a_token_reads_the_api_and_cannot_write(fleet, admin_user, client):
    token = create_token(admin_user)  # even an admin's token is read-only
    response = client.get("/api/engines/", headers=bearer(token))
    assert response.status_code == 200
    assert {e["name"] for e in response.json()["engines"]} == {"vllm-main", "llama-side"}
    before = Engine.objects.count(), list(Engine.objects.values_list("status", flat=True))
    for method in ("post", "put", "patch", "delete"):
        response = getattr(client, method)(
            "/api/engines/", data="{}", content_type="application/json", headers=bearer(token)
        )
        assert response.status_code == 403 and "read-only" in response.json()["error"], method
    assert client.post("/metrics", headers=bearer(token)).status_code == 403
    assert (Engine.objects.count(), list(Engine.objects.values_list("status", flat=True))) == before
    # Pages are not the API: there the header counts for nothing and a session is needed.
    page = client.get("/engines/", headers=bearer(token))
    assert page.status_code == 302 and page["Location"].startswith("/login/")
    assert "sessionid" not in client.cookies  # a token request opens no session


def test_token_cli_shows_the_token_once_and_stores_its_hash(viewer):
    out = io.StringIO()
    call_command("token", "create", "vera", "--name", "grafana", stdout=out)
    lines = out.getvalue().rstrip("\n").splitlines()
    token = lines[-1]
    assert re.fullmatch(r"spk_[A-Za-z0-9_-]{40,}", token) and lines[-1] not in lines[0]
    row = ApiToken.objects.get(user=viewer)
    assert row.digest == hashlib.sha256(token.encode()).hexdigest() and row.name == "grafana"
    assert token not in json.dumps(list(ApiToken.objects.values()), default=str)  # only its digest is kept
    assert token.startswith(row.prefix) and len(row.prefix) < 12

    listing = io.StringIO()
    call_command("token", "list", "--json", stdout=listing)
    (item,) = json.loads(listing.getvalue())
    assert item["prefix"] == row.prefix and item["revoked_at"] is None and token not in listing.getvalue()
    call_command("token", "revoke", str(row.id), stdout=io.StringIO())
    row.refresh_from_db()
    assert row.is_revoked
    with pytest.raises(CommandError, match="already revoked"):
        call_command("token", "revoke", str(row.id))
    with pytest.raises(CommandError, match="no API token with id 999"):
        call_command("token", "revoke", "999")
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        call_command("token", "create", "nobody", "--name", "x")
    assert ApiToken.objects.count() == 1


def test_grafana_dashboard_charts_only_exposed_metrics(polled, viewer, client):
    board = json.loads(GRAFANA.read_text())
    exprs = [t["expr"] for panel in board["panels"] for t in panel.get("targets", [])]
    assert len(exprs) >= 10
    exposed = families(client.get("/metrics", headers=bearer(create_token(viewer))).content.decode())
    # Every family is written with its HELP and TYPE even while it has no sample (no GPU here).
    names = {f"{name}{suffix}" for name in exposed for suffix in ("", "_total")}
    used = {name for expr in exprs for name in re.findall(r"\bsparkops_[a-z_]+", expr)}
    assert used and used - names == set(), used - names


def test_a_token_lists_alerts_changelog_entries_and_benchmark_runs(fleet, viewer, client):
    from sparkops.benchmarks.models import Run

    AlertEvent.objects.create(
        rule="engine_down",
        severity="critical",
        state="firing",
        engine=fleet["llama"],
        subject="llama-side",
        message="down",
        started_at=timezone.now(),
        fired_at=timezone.now(),
    )
    call_command(
        "changelog",
        "import",
        str(Path(__file__).parent / "fixtures" / "changelog" / "spark-config-log.md"),
        stdout=io.StringIO(),
    )
    Run.objects.create(engine=fleet["vllm"], params_hash="abc123", status="failed", reason="HTTP 400")
    token = bearer(create_token(viewer))

    (alert,) = client.get("/api/alerts/?state=firing", headers=token).json()["alerts"]
    assert alert["rule"] == "engine_down" and alert["engine"] == "llama-side" and alert["acknowledged_by"] is None
    assert client.get("/api/alerts/?state=resolved", headers=token).json()["alerts"] == []
    entries = client.get("/api/changelog/", headers=token).json()["entries"]
    out = io.StringIO()
    call_command("changelog", "export", "--format", "json", stdout=out)
    assert entries == json.loads(out.getvalue()) and len(entries) >= 2
    (run,) = client.get("/api/bench/runs/", headers=token).json()["runs"]
    assert run["engine"] == "vllm-main" and run["status"] == "failed" and run["reason"] == "HTTP 400"

    for bad in ("/api/alerts/?limit=0", "/api/alerts/?limit=x", "/api/bench/runs/?limit=5000", "/api/alerts/?state=on"):
        response = client.get(bad, headers=token)
        assert response.status_code == 400 and response.json()["error"], bad


def test_the_profile_page_shows_a_new_token_once_and_revokes_it(viewer_client, viewer, operator, client):
    page = viewer_client.get("/account/tokens/")
    assert page.status_code == 200 and b"No tokens yet" in page.content
    created = viewer_client.post("/account/tokens/", {"name": "grafana"})
    token = re.search(rb"<pre class=\"mono\">(spk_[A-Za-z0-9_-]+)</pre>", created.content).group(1).decode()
    row = ApiToken.objects.get(user=viewer)
    assert row.name == "grafana" and row.digest == hashlib.sha256(token.encode()).hexdigest()
    assert token.encode() not in viewer_client.get("/account/tokens/").content  # shown once
    assert client.get("/api/engines/", headers=bearer(token)).status_code == 200

    theirs, _ = ApiToken.issue(operator, name="theirs")
    assert viewer_client.post(f"/account/tokens/{theirs.pk}/revoke/").status_code == 404  # not yours
    assert not ApiToken.objects.get(pk=theirs.pk).is_revoked
    assert viewer_client.post("/account/tokens/", {"name": "x" * 101}).status_code == 400
    assert ApiToken.objects.filter(user=viewer).count() == 1
    response = viewer_client.post(f"/account/tokens/{row.pk}/revoke/")
    assert response.status_code == 302 and ApiToken.objects.get(pk=row.pk).is_revoked
    assert client.get("/api/engines/", headers=bearer(token)).status_code == 401
