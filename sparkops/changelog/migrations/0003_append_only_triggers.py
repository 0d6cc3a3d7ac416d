"""The database refuses UPDATE and DELETE of a locked change-log entry, its parts and its
corrections (PostgreSQL and SQLite triggers; see sparkops/changelog/dbguard.py)."""
from django.db import migrations

from sparkops.changelog import dbguard


def forward(apps, schema_editor):
    dbguard.install(schema_editor, correction_columns=dbguard.CORRECTION_COLUMNS_0003)


def backward(apps, schema_editor):
    dbguard.uninstall(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("changelog", "0002_locked_at_engine_protect")]
    operations = [migrations.RunPython(forward, backward)]
