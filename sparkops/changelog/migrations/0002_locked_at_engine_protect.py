"""Entry.locked_at (the moment an entry froze, so the database can judge it) and the engine
foreign keys of claims and evidence: PROTECT, since engines are retired, never deleted."""
from datetime import timedelta

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def fill_locked_at(apps, schema_editor):
    Entry = apps.get_model("changelog", "Entry")
    grace = timedelta(seconds=getattr(settings, "SPARKOPS_CHANGELOG_GRACE_S", 15 * 60))
    for entry in Entry.objects.only("pk", "created_at").iterator():
        Entry.objects.filter(pk=entry.pk).update(locked_at=entry.created_at + grace)


class Migration(migrations.Migration):
    dependencies = [
        ("changelog", "0001_initial"),
        ("dashboard", "0004_engine_retired_at"),
    ]

    operations = [
        migrations.AddField(model_name="entry", name="locked_at",
                            field=models.DateTimeField(editable=False, null=True)),
        migrations.RunPython(fill_locked_at, migrations.RunPython.noop),
        migrations.AlterField(model_name="entry", name="locked_at", field=models.DateTimeField(editable=False)),
        migrations.AlterField(
            model_name="claim", name="engine",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT,
                                    related_name="+", to="dashboard.engine")),
        migrations.AlterField(
            model_name="evidencelink", name="engine",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT,
                                    related_name="+", to="dashboard.engine")),
    ]
