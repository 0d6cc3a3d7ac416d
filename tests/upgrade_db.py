"""The two halves of tests/test_upgrade_keeps_data.py that run in a process of their own, against a
scratch database named by DATABASE_URL (never the test database):

- `python -m tests.upgrade_db populate`: migrate an empty database to today's schema (the leaf
  migrations of 2026-12-06, `TODAY_LEAVES`), then write a row into every table of SparkOps' apps
  through the historical models of that schema (what an install upgraded from today holds), and a
  user; prints the census.
- `python -m tests.upgrade_db census`: prints the census again (after `sparkops migrate`), with the
  table of each model the code defines now.

A census is JSON: every table of the database with its row count, and `db_tables`, the table of
each model of SparkOps' apps by its class name."""

from __future__ import annotations

import json
import os
import sys
import uuid
from datetime import timedelta
from decimal import Decimal
from typing import Any

import django

# The schema an install has today (issue 50, item 1: the layout moves must keep its data). A move
# that renames or drops one of these tables, or loses a row of it, fails the test; a new table or
# app is fine. Recorded here, not read from the code, so that the test still says what today was.
TODAY_LEAVES = [
    ("admin", "0003_logentry_add_action_flag_choices"),
    ("alerts", "0009_custom_rule"),
    ("auth", "0012_alter_user_first_name_max_length"),
    ("axes", "0010_accessattemptexpiration"),
    ("bench", "0005_names_are_text"),
    ("changelog", "0007_sparkops_entries_locked"),
    ("contenttypes", "0002_remove_content_type_name"),
    ("dashboard", "0015_host_fence"),
    ("django_celery_beat", "0019_alter_periodictasks_options"),
    ("experiments", "0002_experiment_probe_experiment_probe_run_a_and_more"),
    ("planner", "0001_initial"),
    ("probes", "0002_names_are_text"),
    ("sessions", "0001_initial"),
    ("tokens", "0002_names_are_text"),
]
APPS = ("dashboard", "alerts", "changelog", "bench", "tokens", "probes", "experiments", "planner")
TODAY_TABLES = {
    "StaticBeatEntry": "dashboard_staticbeatentry",
    "Launch": "dashboard_launch",
    "Host": "dashboard_host",
    "Engine": "dashboard_engine",
    "ConfigSnapshot": "dashboard_configsnapshot",
    "EngineStart": "dashboard_enginestart",
    "AuditThreshold": "dashboard_auditthreshold",
    "KVPoolEntry": "dashboard_kvpoolentry",
    "Incident": "dashboard_incident",
    "Series": "dashboard_series",
    "Sample": "dashboard_sample",
    "Rollup": "dashboard_rollup",
    "CollectorState": "dashboard_collectorstate",
    "NotificationChannel": "alerts_notificationchannel",
    "Route": "alerts_route",
    "AlertRule": "alerts_alertrule",
    "AlertRuleOverride": "alerts_alertruleoverride",
    "AlertEvent": "alerts_alertevent",
    "AlertNote": "alerts_alertnote",
    "Silence": "alerts_silence",
    "MaintenanceWindow": "alerts_maintenancewindow",
    "Delivery": "alerts_delivery",
    "DeliveryAttempt": "alerts_deliveryattempt",
    "RuleState": "alerts_rulestate",
    "InboxMessage": "alerts_inboxmessage",
    "CustomRule": "alerts_customrule",
    "Entry": "changelog_entry",
    "FlagChange": "changelog_flagchange",
    "Claim": "changelog_claim",
    "Correction": "changelog_correction",
    "EvidenceLink": "changelog_evidencelink",
    "EntryRevision": "changelog_entryrevision",
    "SearchDocument": "changelog_searchdocument",
    "Profile": "bench_profile",
    "Run": "bench_run",
    "Repetition": "bench_repetition",
    "PairRun": "bench_pairrun",
    "Sweep": "bench_sweep",
    "ApiToken": "tokens_apitoken",
    "ProbeProfile": "probes_probeprofile",
    "ProbeRun": "probes_proberun",
    "ProbeCase": "probes_probecase",
    "Experiment": "experiments_experiment",
    "Slot": "experiments_slot",
    "BoxSetting": "planner_boxsetting",
}


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")
    django.setup()


def _value(field: Any, n: int) -> Any:
    """A value FIELD's column takes, distinct per N where the field is unique."""
    from django.utils import timezone

    if field.choices:
        return field.choices[0][0]
    kind = field.get_internal_type()
    if kind in ("CharField", "TextField", "SlugField"):
        return f"upgrade-{field.name}-{n}"[: field.max_length or 200]
    if kind.endswith("IntegerField"):
        return n
    return {
        "FloatField": 1.0,
        "DecimalField": Decimal(1),
        "BooleanField": False,
        "DateTimeField": timezone.now(),
        "DateField": timezone.now().date(),
        "DurationField": timedelta(seconds=1),
        "JSONField": {},
        "UUIDField": uuid.uuid4(),
        "BinaryField": b"x",
        "GenericIPAddressField": "127.0.0.1",
    }[kind]


class Filler:
    """One row in every table of APPS through the historical models of a migration state: each
    required field gets a value of its type, each required foreign key a row made first. The
    tables' own CHECK constraints ask for more, written in `EXTRA` by hand."""

    def __init__(self, apps: Any) -> None:
        self.apps = apps
        self.made: dict[str, Any] = {}

    def extra(self, model: Any) -> dict[str, Any]:
        from django.utils import timezone

        label = model._meta.label
        if label == "dashboard.Series":  # an engine's series or a host's, never both
            return {"engine": self.row("dashboard.Engine")}
        if label == "alerts.CustomRule":  # an engine rule names no host
            return {"scope": "engine"}
        if label == "alerts.MaintenanceWindow":
            return {"ends_at": timezone.now() + timedelta(hours=1)}
        if label == "changelog.Entry":  # still in its grace period: its flags, claims and links can be added
            return {"locked_at": timezone.now() + timedelta(days=1)}
        if label == "changelog.EvidenceLink":  # evidence of an entry or of a correction
            return {"entry": self.row("changelog.Entry")}
        return {}

    def row(self, label: str) -> Any:
        if label in self.made:
            return self.made[label]
        model = self.apps.get_model(label)
        values = self.extra(model)
        for field in model._meta.concrete_fields:
            if field.name in values or field.auto_created or getattr(field, "auto_now_add", False):
                continue
            if field.is_relation:
                if not field.null:
                    values[field.name] = self.row(field.related_model._meta.label)
            elif not (field.null or field.has_default() or getattr(field, "auto_now", False)):
                values[field.name] = _value(field, len(self.made) + 1)
        self.made[label] = obj = model._default_manager.create(**values)
        return obj

    def fill(self) -> None:
        models = [m for m in self.apps.get_models() if m._meta.app_label in APPS and m._meta.managed]
        # A correction locks the entry it points at, which then takes no more parts: it comes last.
        models.sort(key=lambda m: m._meta.label == "changelog.Correction")
        for model in models:
            if model._meta.label == "changelog.Correction":
                self.many_to_many(models)
            self.row(model._meta.label)

    def many_to_many(self, models: list[Any]) -> None:
        for model in models:
            for m2m in model._meta.local_many_to_many:
                if m2m.remote_field.through._meta.auto_created:
                    getattr(self.row(model._meta.label), m2m.name).add(self.row(m2m.related_model._meta.label))


def census() -> dict[str, Any]:
    from django.apps import apps
    from django.db import connection

    tables = {}
    with connection.cursor() as cursor:
        for table in sorted(connection.introspection.table_names(cursor)):
            cursor.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")
            tables[table] = cursor.fetchone()[0]
    db_tables = {m.__name__: m._meta.db_table for m in apps.get_models() if m._meta.app_label in APPS}
    return {"tables": tables, "db_tables": db_tables}


def populate() -> None:
    from django.contrib.auth.hashers import make_password
    from django.db import connection, transaction
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    executor.migrate(TODAY_LEAVES)
    state = executor.loader.project_state(TODAY_LEAVES)
    with transaction.atomic():
        Filler(state.apps).fill()
        state.apps.get_model("auth", "User").objects.create(username="upgrade", password=make_password("x"))


def main(argv: list[str]) -> int:
    _setup()
    if argv == ["populate"]:
        populate()
    elif argv != ["census"]:
        print("usage: python -m tests.upgrade_db populate|census", file=sys.stderr)
        return 2
    print(json.dumps(census()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
