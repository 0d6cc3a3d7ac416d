"""SparkOps' own readings as Prometheus metrics (GET /metrics, dashboard/views/metrics.py).

A custom collector on a registry of its own (prometheus_client): every scrape reads the latest
stored readings — Engine.latest, Host.latest, the firing AlertEvents, the outbox — and yields
metric families; prometheus_client writes the text. Nothing is polled at scrape time, so a
scrape costs a few queries however often Prometheus comes. deploy/grafana/sparkops.json
charts these names."""

from django.db.models import Count
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from sparkops.version import __version__

ENGINE_LABELS = ["engine", "kind", "host"]
# Engine.latest key → (metric name, help, scale)
ENGINE_GAUGES = [
    (
        "generation_tokens_per_s",
        "sparkops_engine_generation_tokens_per_second",
        "Decode throughput (generated tokens/s)",
        1,
    ),
    ("prompt_tokens_per_s", "sparkops_engine_prompt_tokens_per_second", "Prompt (prefill) tokens/s", 1),
    ("kv_cache_usage", "sparkops_engine_kv_cache_usage_ratio", "KV cache in use, 0-1", 1),
    ("kv_pool_tokens", "sparkops_engine_kv_pool_tokens", "KV pool size in tokens", 1),
    ("prefix_cache_hit_rate", "sparkops_engine_prefix_cache_hit_ratio", "Prefix-cache hits/queries over the window", 1),
    ("requests_running", "sparkops_engine_requests_running", "Requests being served", 1),
    ("requests_waiting", "sparkops_engine_requests_waiting", "Requests queued", 1),
    ("preemptions_per_s", "sparkops_engine_preemptions_per_second", "Preemptions/s", 1),
    ("spec_acceptance_rate", "sparkops_engine_spec_decode_acceptance_ratio", "Speculative decoding acceptance", 1),
    ("window", "sparkops_engine_context_window_tokens", "Served context window (tokens)", 1),
]
QUANTILES = [
    ("ttft", "sparkops_engine_time_to_first_token_seconds", "Time to first token"),
    ("itl", "sparkops_engine_inter_token_latency_seconds", "Inter-token latency"),
]
STATUSES = ("up", "loading", "down", "unknown")
GPU_GAUGES = [
    ("sm_clock_mhz", "sparkops_gpu_sm_clock_hertz", "SM clock", 1e6),
    ("sm_clock_max_mhz", "sparkops_gpu_sm_clock_max_hertz", "Maximum SM clock", 1e6),
    ("utilization_pct", "sparkops_gpu_utilization_ratio", "GPU utilisation, 0-1", 0.01),
    ("power_w", "sparkops_gpu_power_watts", "Power draw", 1),
    ("temperature_c", "sparkops_gpu_temperature_celsius", "Temperature", 1),
    ("memory_used_bytes", "sparkops_gpu_memory_used_bytes", "GPU memory in use", 1),
]
HOST_GAUGES = [
    ("mem_total_bytes", "sparkops_host_memory_total_bytes", "MemTotal"),
    ("mem_available_bytes", "sparkops_host_memory_available_bytes", "MemAvailable"),
    ("swap_total_bytes", "sparkops_host_swap_total_bytes", "Swap size"),
    ("swap_used_bytes", "sparkops_host_swap_used_bytes", "Swap in use"),
]


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _timestamp(value):
    return value.timestamp() if value else None


class SparkOpsCollector(Collector):
    """One scrape: the stored state of every watched (not retired) engine, host and GPU, the
    firing alerts and the outbox."""

    def collect(self):
        yield from self._engines()
        yield from self._hosts()
        yield from self._alerts()
        yield from self._outbox()
        info = InfoMetricFamily("sparkops", "SparkOps itself")
        info.add_metric([], {"version": __version__})
        yield info

    def _engines(self):
        from dashboard.models import Engine

        engines = list(Engine.objects.filter(retired_at__isnull=True).select_related("host"))
        up = GaugeMetricFamily("sparkops_engine_up", "1 when the engine serves (status up)", labels=ENGINE_LABELS)
        status = GaugeMetricFamily(
            "sparkops_engine_status", "1 for the engine's current status", labels=[*ENGINE_LABELS, "status"]
        )
        expected = GaugeMetricFamily(
            "sparkops_engine_expected_up", "1 when the engine should be up (alerts when not)", labels=ENGINE_LABELS
        )
        last_poll = GaugeMetricFamily(
            "sparkops_engine_last_poll_timestamp_seconds", "When it was last polled", labels=ENGINE_LABELS
        )
        gauges = {key: GaugeMetricFamily(name, doc, labels=ENGINE_LABELS) for key, name, doc, _ in ENGINE_GAUGES}
        quantiles = {
            prefix: GaugeMetricFamily(
                name, f"{doc} (quantile over the poll window)", labels=[*ENGINE_LABELS, "quantile"]
            )
            for prefix, name, doc in QUANTILES
        }
        restarts = CounterMetricFamily(
            "sparkops_engine_unit_restarts", "systemd NRestarts of the engine's unit", labels=ENGINE_LABELS
        )
        for engine in engines:
            labels = [engine.name, engine.kind, engine.host.name]
            latest = engine.latest or {}
            up.add_metric(labels, 1.0 if engine.status == Engine.Status.UP else 0.0)
            expected.add_metric(labels, 1.0 if engine.expected_up else 0.0)
            for name in STATUSES:
                status.add_metric([*labels, name], 1.0 if engine.status == name else 0.0)
            if engine.last_poll_at:
                last_poll.add_metric(labels, _timestamp(engine.last_poll_at))
            for key, _, _, scale in ENGINE_GAUGES:
                value = _number(latest.get(key))
                if value is not None:
                    gauges[key].add_metric(labels, value * scale)
            for prefix, _, _ in QUANTILES:
                for q, key in (("0.5", f"{prefix}_p50_s"), ("0.95", f"{prefix}_p95_s")):
                    value = _number(latest.get(key))
                    if value is not None:
                        quantiles[prefix].add_metric([*labels, q], value)
            n_restarts = _number((latest.get("unit") or {}).get("NRestarts"))
            if n_restarts is not None:
                restarts.add_metric(labels, n_restarts)
        yield from (up, status, expected, last_poll, *gauges.values(), *quantiles.values(), restarts)

    def _hosts(self):
        from dashboard.models import Host

        report = GaugeMetricFamily(
            "sparkops_host_last_report_timestamp_seconds", "When the host's worker last reported", labels=["host"]
        )
        gauges = {key: GaugeMetricFamily(name, doc, labels=["host"]) for key, name, doc in HOST_GAUGES}
        psi = GaugeMetricFamily(
            "sparkops_host_pressure_ratio",
            "PSI share of time stalled, 0-1 (/proc/pressure)",
            labels=["host", "resource", "scope", "window"],
        )
        compilers = GaugeMetricFamily(
            "sparkops_host_compiler_processes", "Compiler processes alive (compile storm)", labels=["host"]
        )
        compilers_rss = GaugeMetricFamily("sparkops_host_compiler_rss_bytes", "Their resident memory", labels=["host"])
        gpu_labels = ["host", "gpu", "name"]
        gpus = {key: GaugeMetricFamily(name, doc, labels=gpu_labels) for key, name, doc, _ in GPU_GAUGES}
        throttled = GaugeMetricFamily(
            "sparkops_gpu_clocks_event_reasons", "Active clocks-event (throttle) reasons", labels=gpu_labels
        )
        for host in Host.objects.all():
            latest = host.latest or {}
            if host.last_report_at:
                report.add_metric([host.name], _timestamp(host.last_report_at))
            h = latest.get("host") or {}
            for key, _, _ in HOST_GAUGES:
                value = _number(h.get(key))
                if value is not None:
                    gauges[key].add_metric([host.name], value)
            for resource, scopes in (h.get("psi") or {}).items():
                for scope, windows in (scopes or {}).items():
                    for window in ("avg10", "avg60", "avg300"):
                        value = _number((windows or {}).get(window))
                        if value is not None:
                            psi.add_metric([host.name, resource, scope, window], value / 100)
            p = latest.get("processes") or {}
            if _number(p.get("compilers")) is not None:
                compilers.add_metric([host.name], p["compilers"])
                compilers_rss.add_metric([host.name], _number(p.get("compilers_rss_bytes")) or 0)
            for gpu in latest.get("gpus") or []:
                labels = [host.name, str(gpu.get("index", "")), str(gpu.get("name") or "")]
                for key, _, _, scale in GPU_GAUGES:
                    value = _number(gpu.get(key))
                    if value is not None:
                        gpus[key].add_metric(labels, value * scale)
                throttled.add_metric(labels, len(gpu.get("clocks_event_reasons") or []))
        yield from (report, *gauges.values(), psi, compilers, compilers_rss, *gpus.values(), throttled)

    def _alerts(self):
        from sparkops.alerts.models import AlertEvent

        firing = GaugeMetricFamily(
            "sparkops_alerts_firing", "Alerts firing now, by rule and severity", labels=["rule", "severity"]
        )
        rows = (
            AlertEvent.objects.filter(state=AlertEvent.State.FIRING)
            .values("rule", "severity")
            .annotate(n=Count("id"))
            .order_by("rule", "severity")
        )
        for row in rows:
            firing.add_metric([row["rule"], row["severity"]], row["n"])
        yield firing

    def _outbox(self):
        from sparkops.alerts.models import Delivery, NotificationChannel

        backlog = GaugeMetricFamily(
            "sparkops_outbox_backlog", "Notifications not yet sent (pending or sending)", labels=["channel", "kind"]
        )
        failed = GaugeMetricFamily(
            "sparkops_outbox_failed", "Notifications that finally failed", labels=["channel", "kind"]
        )
        failing = GaugeMetricFamily(
            "sparkops_channel_failing", "1 while the channel's deliveries fail", labels=["channel", "kind"]
        )
        counts: dict[int, dict[str, int]] = {}
        for row in Delivery.objects.values("channel_id", "status").annotate(n=Count("id")):
            counts.setdefault(row["channel_id"], {})[row["status"]] = row["n"]
        for channel in NotificationChannel.objects.all():
            labels = [channel.name, channel.kind]
            c = counts.get(channel.id, {})
            backlog.add_metric(labels, c.get(Delivery.Status.PENDING, 0) + c.get(Delivery.Status.SENDING, 0))
            failed.add_metric(labels, c.get(Delivery.Status.FAILED, 0))
            failing.add_metric(labels, 1.0 if channel.health == NotificationChannel.Health.FAILING else 0.0)
        yield from (backlog, failed, failing)


def registry():
    """A registry holding only SparkOps' readings (not this process' own Python metrics)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SparkOpsCollector())
    return reg


def exposition():
    return generate_latest(registry())
