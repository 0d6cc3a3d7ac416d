"""No page answers 5xx: every URL pattern, crawled as every role, over a database holding one of
everything, with every query parameter the views read fuzzed, and every POST endpoint given
empty and garbage forms.

The URL patterns come from the resolver (a new pattern is crawled without editing this file,
unless it takes an argument nobody here knows how to fill: then the test says which). The query
parameters come from the views themselves: a test middleware records which keys each view reads
from request.GET / request.POST, and the crawl repeats with those keys fuzzed until no new key
shows up."""

import re
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from django.contrib.admin.sites import site as admin_site
from django.db import transaction
from django.http import QueryDict
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from dashboard.roles import set_role
from tests.live.test_pages import HOST  # the host reading the live pages are tested with

pytestmark = pytest.mark.django_db

LOG_FIXTURE = Path(__file__).parent / "fixtures" / "changelog" / "spark-config-log.md"
HUGE = "99999999999999999999999"
# Values every read query or form key gets, alone and all together.
FUZZ_VALUES = [
    HUGE,
    "-" + HUGE,
    "-1",
    "0",
    "1",
    "9223372036854775808",
    "1e309",
    "nan",
    "-3.5",
    "",
    " ",
    "ünï©ødé ✓ 😀",
    "<script>alert(1)</script>",
    "x" * 5000,
    "\x00",
    "9999-12-31",
    "0001-01-01",
    "9999-12-31T23:59",
    "0001-01-01T00:00",
    "2026-13-45T99:99",
    '=HYPERLINK("http://x")',
    "alert:" + HUGE,
    "on",
]
# Pairs some views read together (a range from start to end).
FUZZ_PAIRS = [
    {"start": "0001-01-01T00:00", "end": "0001-01-02T00:00"},
    {"start": "9999-12-30T00:00", "end": "9999-12-31T23:59"},
    {"start": "9999-12-31", "end": "9999-12-31"},
    {"start": "0001-01-01", "end": "0001-01-01"},
    {"start": "2026-01-01T00:00+14:00", "end": "2026-01-01T00:00-12:00"},
]
ROLES = ("viewer", "operator", "admin")
ADMIN_FUZZED = ("/admin/dashboard/engine/", "/admin/alerts/alertevent/", "/admin/login/", "/admin/logout/")


# --- one of everything ---------------------------------------------------------------------------------

READING = {
    "up": True,
    "status": "up",
    "models": ["qwen3-8b"],
    "requests_running": 2,
    "requests_waiting": 1,
    "generation_tokens_per_s": 61.5,
    "kv_cache_usage": 0.42,
    "prefix_cache_hit_rate": 0.92,
    "window": 262144,
    "unit": {
        "ActiveState": "active",
        "SubState": "running",
        "Result": "success",
        "ExecMainStatus": "0",
        "Restart": "on-failure",
        "NRestarts": "2",
    },
}
DOWN = {
    "up": False,
    "status": "down",
    "error": "connection refused",
    "models": [],
    "unit": {
        "ActiveState": "inactive",
        "SubState": "dead",
        "Result": "success",
        "ExecMainStatus": "0",
        "Restart": "on-failure",
        "NRestarts": "0",
    },
}


def _stats(median):
    figure = {"n": 3, "median": median, "min": median * 0.9, "max": median * 1.1}
    return {
        "decode_tokens_per_s": figure,
        "ttft_ms": {"n": 3, "median": 80.0, "min": 70.0, "max": 90.0},
        "first_answer_ms": {},
        "prompt_tokens": {"n": 3, "median": 32768},
        "cached_tokens": {"n": 3, "median": 0},
        "completion_tokens": {"n": 3, "median": 512},
        "reasoning_tokens": {},
        "chunks": {"n": 3, "median": 512},
        "errors": {"overload": 1},
        "reps": 3,
        "ok": 2,
    }


def build_world(user=None):
    """Rows of every kind the pages show, made through the project's own services where they exist."""
    from dashboard.models import Engine, Host, Incident, KVPoolEntry
    from dashboard.models.samples import Rollup, Sample, Series
    from sparkops.alerts import services as alert_services
    from sparkops.alerts.models import (
        AlertRule,
        AlertRuleOverride,
        Delivery,
        MaintenanceWindow,
        NotificationChannel,
        Route,
    )
    from sparkops.alerts.rules import REGISTRY
    from sparkops.benchmarks.client import BUCKETS
    from sparkops.benchmarks.models import PairRun, Profile, Repetition, Run
    from sparkops.benchmarks.pair import pair_table
    from sparkops.benchmarks.schedule import profile_set_schedule
    from sparkops.changelog.grammar import EvidenceLine, FlagLine
    from sparkops.changelog.importer import apply_import, plan_import
    from sparkops.changelog.models import Entry
    from sparkops.changelog.services import correction_create, entry_create, entry_link_incidents

    now = timezone.now()
    spark = Host.objects.create(name="spark", latest=HOST, last_report_at=now)
    Host.objects.create(name="never-reported")
    nemotron = Engine.objects.create(
        name="nemotron",
        kind="vllm",
        url="http://127.0.0.1:8012",
        host=spark,
        unit="vllm-nemotron.service",
        status="up",
        latest=READING,
        last_poll_at=now,
        last_ok_at=now,
        status_changed_at=now - timedelta(hours=3),
    )
    q38 = Engine.objects.create(
        name="q38",
        kind="vllm",
        url="http://127.0.0.1:8011",
        host=spark,
        unit="vllm-q38.service",
        status="down",
        status_reason="connection refused",
        latest=DOWN,
        last_poll_at=now,
    )
    Engine.objects.create(
        name="llama",
        kind="llamacpp",
        url="http://127.0.0.1:8080",
        host=spark,
        unit="llama.service",
        unit_scope="user",
        status="loading",
        poll_interval_s=5,
    )
    Engine.objects.create(name="sg", kind="sglang", url="http://127.0.0.1:30000", host=spark)
    Engine.objects.create(name="oa", kind="openai", url="http://127.0.0.1:9000/", host=spark, expected_up=False)
    # An engine that is no longer watched: it left incidents, ledger rows and log entries behind.
    gone = Engine.objects.create(name="gone", kind="vllm", url="http://127.0.0.1:8099", host=spark, unit="gone.service")

    for subject in (nemotron, spark):
        for metric in ("generation_tokens_per_s", "mem_available_bytes"):
            series = Series.objects.create(
                engine=subject if subject is nemotron else None,
                host=subject if subject is spark else None,
                metric=metric,
            )
            Sample.objects.bulk_create(
                Sample(series=series, ts=now - timedelta(seconds=2 * i), value=50.0 + i % 7) for i in range(60)
            )
            Rollup.objects.bulk_create(
                Rollup(
                    series=series,
                    resolution=res,
                    ts=now - timedelta(seconds=res * i),
                    min=1.0,
                    mean=2.0,
                    max=3.0,
                    count=5,
                )
                for res in dict(Rollup.Resolution.choices)
                for i in range(5)
            )

    # Channels of every kind and health, with routes; every rule fired (still open) and fired then resolved.
    NotificationChannel.objects.create(name="ops-mail", kind="email", config={"address": "ops@example.test"})
    hook = NotificationChannel.objects.create(
        name="ops-hook",
        kind="webhook",
        secret="s3cret",
        config={"url": "http://127.0.0.1:9/hook", "format": "alertmanager"},
    )
    NotificationChannel.objects.create(
        name="broken",
        kind="webhook",
        config={"url": "http://127.0.0.1:9/x"},
        enabled=False,
        health="failing",
        last_error="connection refused",
        failing_since=now - timedelta(hours=1),
    )
    Route.objects.create(channel=hook, rule="engine_down", min_severity="critical")
    Route.objects.create(channel=hook, rule="", min_severity="warning")
    events = {}
    for key, rule in REGISTRY.items():
        host_rule = type(rule).__module__.endswith(".host")
        for subject_engine, state in ((nemotron, "open"), (q38, "resolved"), (gone, "open")):
            kw = (
                {"host": spark, "subject": f"spark/{subject_engine.name}"}
                if host_rule
                else {"engine": subject_engine, "subject": subject_engine.name}
            )
            event = alert_services.external_alert_fire(
                rule=key, severity=rule.severity, message=f"{key} fired", cause="exit0_no_restart", **kw
            )
            if state == "resolved":
                event = alert_services.external_alert_resolve(rule=key, **kw)
            events[(key, state, subject_engine.name)] = event
    AlertRule.objects.update_or_create(
        key="engine_down", defaults={"severity": "warning", "renotify_s": 600, "params": {"for_s": 0}}
    )
    AlertRuleOverride.objects.create(rule=AlertRule.objects.get(key="engine_down"), engine=nemotron, enabled=False)
    from sparkops.alerts.custom_services import custom_rule_create

    custom_rule_create(  # a rule of the operator's own (issue 51), routed to the hook
        data={
            "name": "kv-high",
            "engine": nemotron.name,
            "metric": "kv_cache_usage",
            "comparator": ">",
            "threshold": 0.95,
            "for": "5m",
            "channels": [hook.name],
        }
    )
    open_event = events[("engine_down", "open", "nemotron")]
    alert_services.alert_ack(event=open_event, user=user)
    Delivery.objects.filter(pk__in=Delivery.objects.values("pk")[:2]).update(
        status="failed", attempts=5, last_error="HTTP 500"
    )
    Delivery.objects.filter(status="pending").update(status="sent", sent_at=now, attempts=1, duration_ms=12.5)

    # Silences (engine, host, everything, expired) and maintenance windows (now, later, over).
    alert_services.silence_create(event=open_event, hours=2, reason="rebuilding")
    alert_services.silence_create(host=spark, rule="memory_pressure", hours=1)
    alert_services.silence_create(rule="", hours=0.5, reason="everything")
    alert_services.silence_create(engine=q38, hours=1)
    from sparkops.alerts.models import Silence

    Silence.objects.create(engine=q38, until=now - timedelta(hours=1))
    alert_services.maintenance_create(
        starts_at=now - timedelta(minutes=5), ends_at=now + timedelta(hours=1), engine=q38, reason="swap the model"
    )
    alert_services.maintenance_create(
        starts_at=now + timedelta(days=1), ends_at=now + timedelta(days=1, hours=2), host=spark
    )
    MaintenanceWindow.objects.create(starts_at=now - timedelta(days=2), ends_at=now - timedelta(days=1))

    # Incidents: host-level (no engine), engine, closed with its fix, and the removed engine's.
    Incident.objects.create(opened_at=now - timedelta(days=3), trigger="Xid 13 on GPU 0")  # host-level, no unit
    closed = Incident.objects.create(
        opened_at=now - timedelta(days=2),
        engine=nemotron,
        unit="vllm-nemotron.service",
        trigger="CUDA illegal instruction, exit 0",
        closed_at=now - timedelta(days=1),
        fix_that_held="Restart=always",
    )
    Incident.objects.create(
        opened_at=now - timedelta(hours=5), engine=gone, trigger="OOM kill", peak="=cmd|' /C calc'!A0"
    )

    # KV-pool ledger rows: by hand and from the collector, a formula in a note, a negative share.
    first = KVPoolEntry.objects.create(
        recorded_at=now - timedelta(days=10),
        engine=nemotron,
        memory_share=0.30,
        kv_memory_bytes=9 * 1024**3,
        pool_tokens=2_780_000,
        window=131072,
        concurrency=21.2,
        source="collector",
    )
    KVPoolEntry.objects.create(
        recorded_at=now - timedelta(days=9),
        engine=nemotron,
        memory_share=0.25,
        kv_memory_bytes=8 * 1024**3,
        pool_tokens=2_500_000,
        window=262144,
        concurrency=10.31,
        previous=first,
        note='=HYPERLINK("http://evil.example","click")',
    )
    KVPoolEntry.objects.create(recorded_at=now - timedelta(days=8), engine=q38, memory_share=-3.5, note="+1 -1 @x")
    KVPoolEntry.objects.create(recorded_at=now - timedelta(days=7), engine=gone, pool_tokens=0, kv_memory_bytes=0)

    # Benchmarks: profiles (scheduled or not), runs of every status, repetitions of every bucket, a pair.
    profile = Profile.objects.create(name="deep-32k", engine=nemotron, depth=32768, reps=3)
    profile_set_schedule(profile=profile, cron="0 3 * * *", enabled=True)
    other = Profile.objects.create(name="q38-cold", engine=q38, depth=1024, reps=1)
    Profile.objects.create(name="gone-profile", engine=gone)
    runs = {}
    for status in Run.Status.values:
        runs[status] = Run.objects.create(
            engine=nemotron,
            profile=profile,
            params_hash=profile.params_hash,
            status=status,
            total_reps=3,
            done_reps=3 if status in ("done", "failed") else 1,
            stats=_stats(60.0) if status == "done" else {},
            reason="" if status == "done" else f"{status}: because",
            started_at=now - timedelta(minutes=9),
            finished_at=now if status in ("done", "failed", "refused") else None,
            tainted=status == "done",
            taint_reasons=["gpu clock low"] if status == "done" else [],
            regression=status == "done",
            regression_detail={"baseline": 70.0} if status == "done" else {},
            checks=[{"name": "cold", "ok": False, "detail": "cached 12 tokens"}],
            trigger="scheduled",
            config={"window": 262144, "models": ["qwen3-8b"]},
            conditions={"start": {"gpu": {"sm_clock_mhz": 800}}, "end": {}},
        )
    Run.objects.create(engine=q38, params_hash="cli", status="done", trigger="cli", stats=_stats(30.0))
    Run.objects.create(engine=gone, params_hash="gone", status="done", stats=_stats(1.0))
    done = runs["done"]
    for i, bucket in enumerate(("", *BUCKETS)):
        Repetition.objects.create(
            run=done,
            index=i,
            started_at=now,
            ok=not bucket,
            bucket=bucket,
            error=f"{bucket} happened" if bucket else "",
            http_status=503 if bucket else 200,
            ttft_ms=None if bucket else 80.0,
            decode_tokens_per_s=None if bucket else 60.0,
            chunks=0 if bucket else 512,
            timings={"predicted_per_second": 60.0},
        )
    pair = PairRun.objects.create(profile_a=profile, profile_b=other, status="done", finished_at=now)
    pair_runs = {
        (p.pk, phase): Run.objects.create(
            engine=p.engine,
            profile=p,
            params_hash=p.params_hash,
            status="done",
            trigger="pair",
            pair=pair,
            phase=phase,
            stats=_stats(rate),
        )
        for p, rate in ((profile, 60.0), (other, 30.0))
        for phase in ("solo", "both")
    }
    pair.table = pair_table(
        a=profile,
        b=other,
        solo={p.pk: pair_runs[(p.pk, "solo")] for p in (profile, other)},
        both={p.pk: pair_runs[(p.pk, "both")] for p in (profile, other)},
    )
    pair.save()
    PairRun.objects.create(profile_a=profile, profile_b=other, status="failed", reason="engine down")

    # The change log: the field report's log (claims, predictions, corrections of claims), plus an entry with
    # evidence of every kind and an entry-level correction, one still editable and one locked.
    apply_import(plan_import(LOG_FIXTURE.read_text()))
    alert_ref = events[("kernel_fault", "resolved", "q38")]
    evidence = [
        EvidenceLine("url", url="https://example.test/log"),
        EvidenceLine("benchmark_run", ref_id=done.pk),
        EvidenceLine("alert_event", ref_id=alert_ref.pk),
        EvidenceLine("alert_event", ref_id=4_000_000_000 // 2),
        EvidenceLine("benchmark_run", ref_id=123456789),
        EvidenceLine("chart_window", window_start=now - timedelta(hours=2), window_end=now - timedelta(hours=1)),
    ]
    entry = entry_create(
        effective_at=now - timedelta(hours=1),
        title="Restart=always for nemotron",
        kind="decision",
        engines=[nemotron, gone],
        units="vllm-nemotron.service",
        body_md="**bold** <b>raw</b>",
        flags=[FlagLine("Restart", "on-failure", "always")],
        evidence=evidence,
        claims=[
            {"text": "pool grows", "metric": "pool_tokens", "predicted": 950000.0, "window": 262144, "engine": gone}
        ],
    )
    correction_create(
        entry=entry, text_md="Entry-level: it was the unit, not the flag.", mark="withdrawn", evidence=evidence
    )
    correction_create(entry=entry, claim=entry.claims.first(), text_md="Claim-level: pool shrank.", mark="superseded")
    entry_link_incidents(entry=entry, incidents=[closed])
    for kind in Entry.Kind.values:
        entry_create(effective_at=now - timedelta(days=400), title=f"old {kind}", kind=kind)

    new = build_measured(spark, user)
    _stop_watching(gone)
    return {"entry": entry, "alert_ref": alert_ref, "done_run": done, **new}


def build_measured(spark, user=None):
    """What the probes, sweeps, rate runs, experiments and the planner show, measured for real: two simulated
    vLLM engines (simulator, served from a loop thread) run through the apps' own services, so each
    page reads the shapes the code writes. Then the simulators stop (the pages read the database only)."""
    from dashboard.models import Engine
    from simulator.core import EngineConfig
    from simulator.engine import create_engine
    from sparkops.audit.thresholds import thresholds, thresholds_save
    from sparkops.benchmarks.models import Run
    from sparkops.benchmarks.rate import rate_create, rate_execute
    from sparkops.benchmarks.spec import RunSpec
    from sparkops.benchmarks.sweep import sweep_create, sweep_execute
    from sparkops.experiments.create import experiment_create
    from sparkops.experiments.record import experiment_record
    from sparkops.experiments.runner import experiment_advance
    from sparkops.planner.models import BoxSetting
    from sparkops.probes.models import ProbeProfile, ProbeRun
    from sparkops.probes.schedule import probe_set_schedule
    from sparkops.probes.services import probe_run_create, probe_run_execute
    from tests.benchmarks.conftest import LoopThread

    BoxSetting.objects.create(host=spark, headroom_gib=20.0)
    key, field, default, _bounds = next(t for t in thresholds() if isinstance(t[2], int) and t[2] > 1)
    thresholds_save(host=spark, values={(key, field): default + 1}, user=user)

    loop = LoopThread()
    sims = []
    try:
        for over_window, recall in (("reject", "10:1,50:0,90:1"), ("clamp", "1")):
            config = EngineConfig(
                kind="vllm",
                load_seconds=0.0,
                ttft=0.002,
                rate=3000.0,
                prefill_rate=400000.0,
                needle_recall=recall,
                needle_decoy=1.0,
                over_window=over_window,
                tool_calls="strings",
                degenerate_after=300,
                reasoning_tokens=32,
                reasoning_effort="inverted",
            )
            sims.append(loop.run(create_engine(config)))
        engines = [
            Engine.objects.create(
                name=name, kind="vllm", url=s.url, host=spark, status="up", latest={**READING, "window": 32768}
            )
            for name, s in zip(("sim-a", "sim-b"), sims)
        ]
        sim_a, sim_b = engines
        probes = {}
        for kind, tokens in (("needle", 1500), ("soak", 600), ("tool", 4096), ("thinking", 4096), ("contract", 4096)):
            profile = ProbeProfile.objects.create(
                name=f"sim-{kind}",
                engine=sim_a,
                kind=kind,
                tokens=tokens,
                timeout_s=30,
                created_by=user,
                control=kind == "needle",
            )
            if kind == "needle":
                probe_set_schedule(profile=profile, cron="0 * * * *", enabled=True)
            run = probe_run_create(engine=sim_a, spec=profile.spec(), profile=profile, user=user)
            probes[kind] = probe_run_execute(run=run)
        for status in (ProbeRun.Status.QUEUED, ProbeRun.Status.RUNNING, ProbeRun.Status.FAILED):
            ProbeRun.objects.create(
                profile=profile,
                engine=sim_a,
                kind=profile.kind,
                params_hash=profile.params_hash,
                status=status,
                reason=f"{status}: because",
            )

        def spec(engine, **kw):
            return RunSpec(engine_name=engine.name, engine_kind="vllm", base_url=engine.base_url, **kw)

        sweep = sweep_execute(
            sweep=sweep_create(
                engine=sim_a,
                axis="concurrency",
                values=[1, 2, 4],
                spec=spec(sim_a, depth=0, output_tokens=16),
                user=user,
            )
        )
        sweep_create(engine=sim_b, axis="depth", values=[0, 1024], spec=spec(sim_b, depth=0, output_tokens=16))
        rate = rate_execute(
            run=rate_create(
                engine=sim_b,
                spec=spec(sim_b, depth=0, output_tokens=16),
                rate=8.0,
                duration_s=1.0,
                arrival="poisson",
                slo_ttft_ms=500.0,
                slo_tpot_ms=50.0,
                user=user,
            )
        )
        workload = {"depth": 0, "output_tokens": 16}
        experiment = experiment_advance(
            experiment=experiment_create(
                name="MTP on codegen",
                engine_a=sim_a,
                engine_b=sim_b,
                workload=workload,
                flags=["--speculative-config"],
                probe="tool",
                user=user,
            )
        )
        experiment_record(experiment=experiment, user=user)
        waiting = experiment_advance(
            experiment=experiment_create(name="restart arm", engine_a=sim_b, engine_b=sim_b, workload=workload)
        )
        experiment_create(name="queued", engine_a=sim_a, engine_b=sim_b, workload=workload)
    finally:
        for s in sims:
            loop.run(s.close())
        loop.stop()
    Engine.objects.filter(pk__in=[e.pk for e in engines]).update(status="down", status_reason="simulator stopped")
    assert sweep.status == Run.Status.DONE and rate.status == Run.Status.DONE, (sweep.reason, rate.reason)
    assert experiment.status == "done" and waiting.status == "waiting", (experiment.reason, waiting.reason)
    assert all(r.status == ProbeRun.Status.DONE for r in probes.values()), {k: r.reason for k, r in probes.items()}
    return {"sweep": sweep, "rate_run": rate, "experiment": experiment, "waiting": waiting, "probe_runs": probes}


def _stop_watching(engine):
    """Retire ENGINE (engines are retired, never deleted: what it left behind stays)."""
    try:
        from dashboard.engine_lifecycle import engine_retire
    except ImportError:
        engine.retired_at, engine.expected_up = timezone.now(), False
        engine.save(update_fields=["retired_at", "expected_up"])
    else:
        engine_retire(name=engine.name)


# --- recording which query and form keys a view reads ----------------------------------------------------


class RecordingQueryDict(QueryDict):
    """A QueryDict that notes every key a view asks for."""

    reads = None

    def _note(self, key):
        if self.reads is not None and isinstance(key, str):
            self.reads.add(key)

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._note(key)
        return super().get(key, default)

    def getlist(self, key, default=None):
        self._note(key)
        return super().getlist(key, default)

    def __contains__(self, key):
        self._note(key)
        return super().__contains__(key)

    def __copy__(self):
        result = super().__copy__()
        result.reads = self.reads
        return result

    def __deepcopy__(self, memo):
        result = super().__deepcopy__(memo)
        result.reads = self.reads
        return result


READS = {"GET": {}, "POST": {}}  # view key -> keys read


def recording_middleware(get_response):
    def middleware(request):
        from django.urls import resolve

        try:
            match = resolve(request.path_info)
        except Exception:  # a 404 path: nothing to record
            return get_response(request)
        key = match.view_name or match.route
        for method in ("GET", "POST"):
            source = getattr(request, method)
            recorded = RecordingQueryDict(mutable=True)
            for name, values in source.lists():
                recorded.setlist(name, values)
            recorded._mutable = False
            recorded.reads = READS[method].setdefault(key, set())
            setattr(request, method, recorded)
        return get_response(request)

    return middleware


@pytest.fixture
def recording(settings):
    settings.MIDDLEWARE = ["tests.test_crawl.recording_middleware", *settings.MIDDLEWARE]
    for reads in READS.values():
        reads.clear()
    return READS


# --- the URL patterns and their arguments ---------------------------------------------------------------


def walk(patterns, prefix="", namespace=None):
    for p in patterns:
        route = prefix + str(p.pattern)
        if isinstance(p, URLResolver):
            yield from walk(p.url_patterns, route, p.namespace or namespace)
        elif isinstance(p, URLPattern):
            name = f"{namespace}:{p.name}" if namespace and p.name else (p.name or route)
            yield route, name, p.callback


ARG = re.compile(r"<(?:(?P<conv>\w+):)?(?P<name>\w+)>|\(\?P<(?P<rname>\w+)>[^)]*\)")


def _argument_values(name, arg, route):
    """Real values and absent ones for one path argument of the pattern NAME."""
    from dashboard.models import Engine, Host, Incident
    from sparkops.alerts.models import AlertEvent, MaintenanceWindow, NotificationChannel, Silence
    from sparkops.alerts.rules import REGISTRY
    from sparkops.benchmarks.models import PairRun, Profile, Run, Sweep
    from sparkops.changelog.models import Entry
    from sparkops.experiments.models import Experiment
    from sparkops.probes.models import ProbeProfile, ProbeRun

    absent_ints = ["0", "424242", HUGE]
    absent_names = ["no-such", "ünï©ødé", "%00", "x" * 300]
    by_view = {
        "alerts:detail": AlertEvent,
        "alerts:ack": AlertEvent,
        "alerts:silence": AlertEvent,
        "alerts:channel-test": NotificationChannel,
        "alerts:channel-routes": NotificationChannel,
        "alerts:silence-end": Silence,
        "alerts:maintenance-end": MaintenanceWindow,
        "changelog:entry": Entry,
        "changelog:edit": Entry,
        "changelog:correct": Entry,
        "changelog:incident-close": Incident,
        "bench:profile": Profile,
        "bench:profile-edit": Profile,
        "bench:profile-run": Profile,
        "bench:run": Run,
        "bench:pair": PairRun,
        "bench:sweep": Sweep,
        "bench:sweep-export": Sweep,
        "bench:sweep-attach": Sweep,
        "bench:sweep-again": Sweep,
        "probes:profile": ProbeProfile,
        "probes:profile-edit": ProbeProfile,
        "probes:profile-run": ProbeProfile,
        "probes:run": ProbeRun,
        "experiments:detail": Experiment,
        "experiments:continue": Experiment,
        "experiments:record": Experiment,
    }
    if name == "bench:sweep-export" and arg == "fmt":
        return ["md", "csv", "json", "xls"]
    if name in by_view:
        return _real_ids(by_view[name]) + absent_ints
    if arg == "name" and route.startswith(("engines/", "charts/engine/")):
        return list(Engine.objects.values_list("name", flat=True)) + absent_names
    if arg == "name" and route.startswith(("hosts/", "charts/host/", "planner/")):
        return list(Host.objects.values_list("name", flat=True)) + absent_names
    if name == "alerts:rule-edit":
        return list(REGISTRY) + absent_names
    if name in ("alerts:custom-rule-remove", "alerts:custom-rule-switch", "api:custom-rule"):
        from sparkops.alerts.models import CustomRule

        return list(CustomRule.objects.values_list("name", flat=True)) + absent_names
    if name == "changelog:ledger-export":
        return {"ledger": ["kvpool", "incidents", "nope"], "fmt": ["md", "csv", "xlsx"]}[arg]
    if route.startswith("admin/"):
        return _admin_values(name, arg, route)
    # A pattern this file does not know yet still gets crawled: with the first ids (most tables have them)
    # and absent values. Add it above to give it its real rows.
    UNMAPPED.add(name)
    return ["1", "2", "3", *absent_ints] if route_converter(route, arg) in ("int", "id") else ["x", *absent_names]


UNMAPPED = set()


def route_converter(route, arg):
    m = re.search(rf"<(?:(\w+):)?{arg}>", route)
    return (m.group(1) or "str") if m else "str"


def _interesting(model):
    """Rows worth a page of their own, beside the first and last few."""
    from django.db.models import Q

    from dashboard.models import Incident
    from sparkops.alerts.models import AlertEvent
    from sparkops.benchmarks.models import Run
    from sparkops.changelog.models import Entry
    from sparkops.experiments.models import Experiment
    from sparkops.probes.models import ProbeRun
    from sparkops.probes.spec import KINDS

    return {
        Run: [Q(trigger="rate"), Q(sweep__isnull=False), Q(experiment_slot__isnull=False)],
        ProbeRun: [Q(kind=kind, status="done") for kind in KINDS] + [Q(status="failed")],
        Experiment: [Q(status="done"), Q(status="waiting")],
        AlertEvent: [
            Q(engine__isnull=True),
            Q(engine__name="gone"),
            Q(state="resolved"),
            Q(acknowledged_at__isnull=False),
            Q(incident__isnull=False, engine__isnull=True),
        ],
        Incident: [Q(engine__isnull=True, unit=""), Q(engine__name="gone"), Q(closed_at__isnull=False)],
        Entry: [
            Q(evidence__isnull=False, corrections__isnull=False),
            Q(created_at__lt=timezone.now() - timedelta(days=1)),
        ],
    }.get(model, [])


def _real_ids(model, edge=2):
    """Real primary keys of MODEL: the interesting rows first, then the first and last EDGE."""
    pks = list(model.objects.order_by("pk").values_list("pk", flat=True))
    chosen = [model.objects.filter(q).order_by("pk").values_list("pk", flat=True).first() for q in _interesting(model)]
    chosen += pks[:edge] + pks[-edge:]
    return [str(pk) for pk in dict.fromkeys(pk for pk in chosen if pk is not None)]


def _admin_values(name, arg, route):
    from django.contrib.contenttypes.models import ContentType

    if arg == "app_label":
        return [*sorted({m._meta.app_label for m in admin_site._registry}), "nope"]
    if arg == "object_id" and name == "admin:view_on_site":
        return ["1", "424242"]
    if arg in ("object_id", "id"):
        app_label, model_name = route.split("/")[1:3]
        for model in admin_site._registry:
            if (model._meta.app_label, model._meta.model_name) == (app_label, model_name):
                return [*_real_ids(model, edge=1), "424242", HUGE, "x%00"]
        raise AssertionError(f"no admin model for {route}")
    if arg == "content_type_id":
        return [str(ContentType.objects.first().pk), "424242"]
    if arg == "url":
        return ["nope/", "dashboard/nope/"]
    raise AssertionError(f"the crawl does not know how to fill <{arg}> of admin pattern {name}")


def crawl_paths():
    """(view name, path, is_real) for every URL pattern and argument value."""
    out = []
    for pattern, name, _ in walk(get_resolver().url_patterns):
        route = pattern.lstrip("^").replace("\\Z", "").rstrip("$")
        args = [m.group("name") or m.group("rname") for m in ARG.finditer(route)]
        combos = [{}]
        for arg in args:
            values = _argument_values(name, arg, route)
            combos = [{**c, arg: v} for c in combos for v in values]
        for combo in combos:

            def fill(m):
                value = combo[m.group("name") or m.group("rname")]
                return value if "%" in value else quote(value, safe="")

            path = "/" + ARG.sub(fill, route).replace("\\", "")
            out.append((name, path))
    return out


# --- the crawl -----------------------------------------------------------------------------------------


def _users(django_user_model):
    users = {}
    for role in ROLES:
        users[role] = django_user_model.objects.create_user(username=f"crawl-{role}", password="crawl-password-123")
        set_role(users[role], role)
    return users


def _clients(users):
    clients = {"anonymous": Client(raise_request_exception=False)}
    for role, user in users.items():
        clients[role] = Client(raise_request_exception=False)
        clients[role].force_login(user)
    return clients


class _RolledBack(Exception):
    def __init__(self, response):
        super().__init__()
        self.response = response


class Crawl:
    """The world, a client per role, the paths to crawl, and the 5xx answers seen."""

    def __init__(self, built):
        self.clients = _clients(built.users)  # a crawl's own sessions (one POSTs /logout/ for each role)
        self.world, self.paths = built.world, built.paths
        self.failures, self.requests, self.started = [], 0, time.monotonic()

    def request(self, role, method, path, data=None):
        client = self.clients[role]
        # Each request in a savepoint, as each real request has a transaction of its own: a database error
        # in one (a 500) must not abort the test's transaction for every request after it.
        try:
            with transaction.atomic():
                response = client.get(path, data) if method == "GET" else client.post(path, data or {})
                if response.status_code >= 500:
                    raise _RolledBack(response)
        except _RolledBack as answered:
            response = answered.response
        self.requests += 1
        if response.status_code >= 500 and not (path == "/healthz" and response.status_code == 503):  # its "unhealthy"
            exc = getattr(response, "exc_info", None)
            why = f"{exc[0].__name__}: {str(exc[1])[:160]}" if exc else ""
            shown = {k: (v[:30] + "…" if isinstance(v, str) and len(v) > 30 else v) for k, v in (data or {}).items()}
            self.failures.append(f"{method} {path[:120]} {shown or ''} as {role}: {response.status_code} {why}")
        return response

    def representative(self):
        """One path per view: the first, which has a real argument (real values are listed first)."""
        seen = {}
        for name, path in self.paths:
            seen.setdefault(name, path)
        return seen

    def assert_no_5xx(self):
        unique = list(dict.fromkeys(self.failures))  # in the order they happened
        assert not unique, f"{len(unique)} requests (of {self.requests}) answered 5xx:\n" + "\n".join(unique[:60])


@pytest.fixture
def uninstrumented_templates():
    """Templates rendered as in production. Django's test environment wraps every render to send
    `template_rendered`, and its test client keeps a copy of the context of each render (each
    include in each loop too) for `response.context`; the crawl reads only status codes, and those
    copies were most of its time."""
    from django.template import Template

    def render(self, context):  # django.template.base.Template._render, as the test environment found it
        return self.nodelist.render(context)

    instrumented = Template._render
    Template._render = render
    yield
    Template._render = instrumented


# The crawls run first in the run (tests/conftest.py HEAVY_FIRST), in two xdist groups: the query fuzz
# (about half the crawls' CPU) on one worker, the other three on another. Each worker builds the world
# once for its group (crawl_world is module-scoped): one world for all four on one worker made that
# worker the run's last by 20-50 s, one core idle meanwhile.
CRAWL = pytest.mark.xdist_group("crawl")
CRAWL_FUZZ = pytest.mark.xdist_group("crawl-fuzz")


@pytest.fixture(scope="module")
def crawl_world(django_db_setup, django_db_blocker):
    """The crawl's users, world and paths, built once a worker for the module's crawls instead of once
    each (a build took 12-14 s of a loaded box: two simulated engines measured through the apps'
    services), in a transaction of its own that is rolled back after the last crawl. Each crawl runs
    in a savepoint inside it (the `db` fixture's, as under a Django TestCase's setUpTestData), so
    whatever one crawl's POSTs changed is gone before the next one starts."""
    from types import SimpleNamespace

    from django.contrib.auth import get_user_model

    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        try:
            users = _users(get_user_model())
            built = SimpleNamespace(users=users, world=build_world(users["operator"]), paths=crawl_paths())
        except BaseException:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)
            raise
    yield built
    with django_db_blocker.unblock():
        transaction.set_rollback(True)
        outer.__exit__(None, None, None)


@pytest.fixture
def crawl(crawl_world, db, recording, settings, uninstrumented_templates):
    settings.DEBUG_PROPAGATE_EXCEPTIONS = False
    return Crawl(crawl_world)


@CRAWL
def test_every_url_pattern_as_every_role(crawl):
    """GET every pattern with real and absent arguments, as every role."""
    representative = set(crawl.representative().values())
    for role in ("anonymous", *ROLES):
        for _name, path in crawl.paths:
            is_admin = path.startswith("/admin/")
            # Viewers and admins see every path (the least and the most on a page); anonymous visitors and
            # operators one path of each pattern, and outside the admin's own pages.
            every = role == "admin" or (role == "viewer" and not is_admin)
            if not every and path not in representative:
                continue
            crawl.request(role, "GET", path)
    print(f"crawl: patterns filled with generic values (add them to _argument_values): {sorted(UNMAPPED)}")
    print(
        f"crawl: {time.monotonic() - crawl.started:.0f} s, {crawl.requests} GETs over {len(crawl.paths)} paths of {len(representative)} patterns"
    )
    crawl.assert_no_5xx()


def _fuzzed_queries(keys):
    for value in FUZZ_VALUES:
        for key in keys:
            yield [(key, value)]
        yield [(k, v) for k in keys for v in (value, "1", value)]  # every key, repeated
    for pair in FUZZ_PAIRS:
        yield list(pair.items())


@CRAWL_FUZZ
def test_every_query_parameter_fuzzed(crawl, recording):
    """Each view's query keys (those it was seen to read) get every fuzz value, alone, all together and repeated,
    round after round until no new key is read. As an operator (the pages with most controls), and the
    all-together queries as a viewer and an admin too."""
    # The admin's views are the same few for every model: fuzz them on two models, the app's views on all.
    views = {
        name: path
        for name, path in crawl.representative().items()
        if not path.startswith("/admin/") or path.startswith(ADMIN_FUZZED)
    }
    for path in views.values():
        crawl.request("operator", "GET", path)
    fuzzed = {}
    for _round in range(5):
        todo = {name: sorted(recording["GET"].get(name, set()) - fuzzed.get(name, set())) for name in views}
        todo = {name: keys for name, keys in todo.items() if keys}
        if not todo:
            break
        for name, found in todo.items():
            keys = sorted(fuzzed.setdefault(name, set()) | set(found))
            fuzzed[name] = set(keys)
            for query in _fuzzed_queries(keys):
                url = views[name] + "?" + urlencode(query)
                crawl.request("operator", "GET", url)
                if len(query) > 1:
                    crawl.request("viewer", "GET", url)
                    crawl.request("admin", "GET", url)
    assert {"a", "b"} <= fuzzed.get("bench:compare", set()), f"the recording middleware saw too little: {fuzzed}"
    print(
        f"fuzz: {time.monotonic() - crawl.started:.0f} s, {crawl.requests} GETs; keys read: "
        + ", ".join(f"{n}={sorted(k)}" for n, k in sorted(fuzzed.items()))
    )
    crawl.assert_no_5xx()


FORMSET_INDEX = re.compile(r"-(\d+)-")


def _post_keys(recording, name):
    """The form keys NAME read; of a formset's forms the first three (a garbage TOTAL_FORMS reads a thousand)."""
    keys = recording["POST"].get(name, set()) - {"crawl"}
    return sorted(k for k in keys if not (m := FORMSET_INDEX.search(k)) or int(m.group(1)) < 3)


def _formset_safe(key, value):
    """VALUE, but a formset's form count stays small (a thousand forms per request would take minutes)."""
    if key.endswith(("-TOTAL_FORMS", "-INITIAL_FORMS", "-MIN_NUM_FORMS", "-MAX_NUM_FORMS")):
        return value if len(value) < 3 else "2"
    return value


@CRAWL
def test_every_post_endpoint_with_empty_and_garbage_forms(crawl, recording):
    """POST to every app pattern with real and absent arguments, empty; then to one real path of each, every
    form key it read set to each fuzz value, round after round until no new key is read, as an operator and an
    admin (a viewer's empty POSTs too: 403 or 405, never 5xx)."""
    # Logging out ends the client's session: that one comes last.
    paths = [(name, path) for name, path in crawl.paths if not path.startswith("/admin/") and name != "logout"]
    views = crawl.representative()
    for name, path in paths:  # every path as an admin, one of each pattern as an operator and a viewer
        crawl.request("admin", "POST", path, {})
        if path == views[name]:
            crawl.request("operator", "POST", path, {})
            crawl.request("viewer", "POST", path, {})
            for role in ("operator", "admin"):  # a non-empty POST binds the views' forms: they read their keys
                crawl.request(role, "POST", path, {"crawl": "1"})
    fuzzed = {}
    for _round in range(4):
        todo = {name: keys for name in views if (keys := _post_keys(recording, name)) and keys != fuzzed.get(name)}
        if not todo:
            break
        for name, keys in todo.items():
            fuzzed[name] = keys
            for role in ("operator", "admin"):
                for value in FUZZ_VALUES:
                    crawl.request(role, "POST", views[name], {k: _formset_safe(k, value) for k in keys})
    for name, keys in fuzzed.items():  # a formset told it has a huge number of forms: Django caps it at 1000
        if any(k.endswith("-TOTAL_FORMS") for k in keys):
            crawl.request("admin", "POST", views[name], {k: HUGE if k.endswith("-TOTAL_FORMS") else "x" for k in keys})
    for role in ROLES:
        crawl.request(role, "POST", "/logout/", {"next": HUGE})
    read = {name: sorted(keys) for name, keys in recording["POST"].items() if keys - {"crawl"}}
    print(f"post: {time.monotonic() - crawl.started:.0f} s, {crawl.requests} POSTs; keys read: {read}")
    crawl.assert_no_5xx()
    assert "text_md" in read.get("changelog:correct", []), f"the forms' keys were not seen: {read}"


# One field at a time made bad in a form that is otherwise valid, so the bad value reaches the code past
# validation (the service, the database), where a garbage-everywhere form never gets.
MUTATIONS = [
    HUGE,
    "-" + HUGE,
    "9223372036854775808",
    "2147483648",
    "-1",
    "1e300",
    "nan",
    "",
    "x" * 5000,
    "ünï©ødé ✓",
    "9999-12-31T23:59",
    "0001-01-01T00:00",
    "alert:" + HUGE,
    "run:" + HUGE,
    "alert:2147483648",
    "chart:0001-01-01T00:00/9999-12-31T23:59",
    '=HYPERLINK("http://x")',
]


def _valid_forms(world):
    from dashboard.models import Engine, Incident
    from sparkops.alerts.models import AlertEvent
    from sparkops.audit.thresholds import thresholds

    nemotron = Engine.objects.get(name="nemotron")
    entry, event = world["entry"], AlertEvent.objects.filter(state="firing").first()
    incident = Incident.objects.filter(closed_at__isnull=True).first()
    return {
        "/changelog/new/": {
            "effective_at": "2026-08-20T09:00",
            "kind": "flag_change",
            "title": "Raise the window",
            "engines": str(nemotron.pk),
            "flags": "--max-model-len: 131072 → 262144",
            "body_md": "why",
            "units": "vllm-nemotron.service",
            "reason": "r",
            "expected_effect": "e",
            "evidence": f"run:{world['done_run'].pk}",
            "claims-TOTAL_FORMS": "1",
            "claims-INITIAL_FORMS": "0",
            "claims-0-text": "allocates nothing",
            "claims-0-metric": "concurrency",
            "claims-0-predicted": "10.6",
            "claims-0-window": "262144",
            "claims-0-engine": str(nemotron.pk),
        },
        f"/changelog/{entry.pk}/correct/": {
            "corrected_at": "2026-08-21T09:00",
            "target": "entry",
            "mark": "",
            "text_md": "It was the unit.",
            "evidence": f"alert:{event.pk}",
        },
        "/changelog/ledgers/kvpool/add/": {
            "recorded_at": "2026-08-20T14:00",
            "engine": str(nemotron.pk),
            "memory_share": "0.45",
            "kv_memory_gib": "26.8",
            "pool_tokens": "858483",
            "window": "262144",
            "concurrency": "",
            "note": "window raised",
        },
        f"/changelog/ledgers/incidents/{incident.pk}/close/": {
            "closed_at": "2026-12-01T09:00",
            "fix_that_held": "Restart=always",
            "entries": str(entry.pk),
        },
        f"/alerts/{event.pk}/silence": {"hours": "2", "reason": "rebuilding"},
        "/alerts/maintenance/new": {"scope": "all", "starts_at": "", "ends_at": "2099-01-01T00:00", "reason": "swap"},
        # the new pages' forms (each valid one queues work after commit: the crawl's savepoints never commit)
        "/bench/sweeps/new/": {
            "engine": str(nemotron.pk),
            "axis": "concurrency",
            "values": "1,2,4",
            "depth": "0",
            "concurrency": "1",
            "output_tokens": "32",
            "reps": "3",
            "mode": "cold",
            "error_threshold": "0.2",
        },
        "/bench/rate/new/": {
            "engine": str(nemotron.pk),
            "rate": "2",
            "duration_s": "10",
            "arrival": "poisson",
            "seed": "0",
            "slo_ttft_ms": "2000",
            "slo_tpot_ms": "100",
            "depth": "0",
            "output_tokens": "64",
        },
        "/probes/profiles/new/": {
            "name": "crawl-needle",
            "engine": str(nemotron.pk),
            "kind": "needle",
            "tokens": "1500",
            "depths": "10,50,90",
            "decoys": "2",
            "corpus": "lighthouse",
            "control_corpus": "orchard",
            "sampling": "server",
            "thinking": "server",
            "reps": "3",
            "timeout_s": "600",
            "cron": "0 * * * *",
            "schedule_enabled": "on",
        },
        f"/probes/profiles/{world['probe_runs']['needle'].profile_id}/edit/": {
            "name": "sim-needle",
            "engine": str(nemotron.pk),
            "kind": "needle",
            "tokens": "2000",
            "depths": "10,90",
            "decoys": "1",
            "corpus": "lighthouse",
            "control_corpus": "orchard",
            "sampling": "explicit",
            "sampling_params": '{"temperature": 0.7}',
            "thinking": "off",
            "reps": "5",
            "timeout_s": "60",
            "cron": "",
        },
        "/experiments/new/": {
            "name": "MTP on codegen",
            "engine_a": str(nemotron.pk),
            "engine_b": str(Engine.objects.get(name="q38").pk),
            "flags": "--speculative-config",
            "reps": "3",
            "depth": "0",
            "output_tokens": "64",
            "mode": "cold",
            "probe": "tool",
        },
        "/planner/spark/setting/": {"headroom_gib": "20", "memory_gib": "128"},
        "/planner/spark/claim/": {"engine": "nemotron", "util": "0.3", "window": "262144"},
        "/hosts/spark/audit/": {f"{key}__{field}": str(default) for key, field, default, _ in thresholds()},
    }


@CRAWL
def test_valid_forms_with_one_bad_field(crawl):
    """Each write form, valid but for one field, with each mutation in that field: no 5xx (a 400 or a
    re-rendered form with the reason, or, where the value is acceptable, a redirect)."""
    answers = {}
    for path, valid in _valid_forms(crawl.world).items():
        role = "admin" if path.endswith("/audit/") else "operator"  # a box's thresholds are admins'
        for key in valid:
            for value in MUTATIONS:
                crawl.request(role, "POST", path, {**valid, key: value})
        answers[path] = crawl.request(role, "POST", path, valid).status_code
    print(f"forms: {time.monotonic() - crawl.started:.0f} s, {crawl.requests} POSTs; the valid ones answered {answers}")
    crawl.assert_no_5xx()
