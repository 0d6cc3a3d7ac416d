"""The sample store: one row per (series, time). Pages ask for one series over a range,
so every index below leads with the series."""

from datetime import timedelta

from django.db import models

# How long samples are kept: raw 48 h, 1-minute rollups 90 days, 1-hour rollups for ever
# (applied by samples/store.retention_apply, relied on by selectors/series.choose_source).
RAW_RETENTION = timedelta(hours=48)
MINUTE_RETENTION = timedelta(days=90)


class Series(models.Model):
    """One metric of one subject, e.g. engine 3 `generation_tokens_per_s` or host 1 `psi_memory_some_avg10`."""

    engine = models.ForeignKey(
        "dashboard.Engine", null=True, blank=True, on_delete=models.CASCADE, related_name="series"
    )
    host = models.ForeignKey("dashboard.Host", null=True, blank=True, on_delete=models.CASCADE, related_name="series")
    # Subject-qualified metric, e.g. "gpu0.sm_clock_mhz" on a host.
    metric = models.CharField(max_length=80)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["engine", "metric"], condition=models.Q(host__isnull=True), name="series_engine_metric"
            ),
            models.UniqueConstraint(
                fields=["host", "metric"], condition=models.Q(engine__isnull=True), name="series_host_metric"
            ),
            models.CheckConstraint(
                condition=models.Q(engine__isnull=True) ^ models.Q(host__isnull=True), name="series_one_subject"
            ),
        ]

    def __str__(self):
        return f"{self.engine or self.host}:{self.metric}"


class Sample(models.Model):
    series = models.ForeignKey(Series, on_delete=models.CASCADE, related_name="+")
    ts = models.DateTimeField()
    value = models.FloatField()

    class Meta:
        # "one series between t0 and t1" — the only shape of read.
        indexes = [models.Index(fields=["series", "ts"], name="sample_series_ts")]


class Rollup(models.Model):
    class Resolution(models.IntegerChoices):
        MINUTE = 60, "1 minute"
        HOUR = 3600, "1 hour"

    series = models.ForeignKey(Series, on_delete=models.CASCADE, related_name="+")
    resolution = models.PositiveIntegerField(choices=Resolution.choices)
    ts = models.DateTimeField(help_text="Start of the bucket")
    min = models.FloatField()
    mean = models.FloatField()
    max = models.FloatField()
    count = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["series", "resolution", "ts"], name="rollup_series_res_ts")]


class CollectorState(models.Model):
    """What a collector must remember between polls, one row per subject and source:
    counter baselines and the hit-rate window of an engine (`engine:<id>`), the journal
    cursor of a host (`journal:<host>`), the PSI stall totals (`psi:<host>`)."""

    key = models.CharField(max_length=200, unique=True)
    data = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return self.key
