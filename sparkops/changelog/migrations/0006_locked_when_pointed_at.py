"""What is locked when (issue 25, items 1 and 2): an entry is locked the moment anything points
at it (a correction, an experiment's verdict) and SparkOps's observed entries from their
creation. The triggers are installed again with those locks (sparkops/changelog/dbguard.py;
after the experiments app's tables, whose entry_id they watch), and the entries already in the
log that they would have locked are locked now."""

from django.db import migrations
from django.db.models import Q
from django.utils import timezone

from sparkops.changelog import dbguard
from sparkops.changelog.models import OBSERVED_AUTHOR, OBSERVED_MARK


def forward(apps, schema_editor):
    dbguard.install(schema_editor)
    Entry = apps.get_model("changelog", "Entry")
    Correction = apps.get_model("changelog", "Correction")
    Experiment = apps.get_model("experiments", "Experiment")
    now = timezone.now()
    open_ = Entry.objects.filter(locked_at__gt=now)
    open_.filter(
        Q(pk__in=Correction.objects.values("entry_id"))
        | Q(pk__in=Experiment.objects.exclude(entry_id=None).values("entry_id"))
    ).update(locked_at=now)
    for entry in open_.filter(locked_at__gt=now).only("pk", "author_id", "author_name", "body_md", "created_at"):
        if (entry.author_id is None and entry.author_name == OBSERVED_AUTHOR) or entry.body_md.startswith(
            OBSERVED_MARK
        ):
            Entry.objects.filter(pk=entry.pk).update(locked_at=entry.created_at)


def backward(apps, schema_editor):
    dbguard.install(schema_editor)  # the triggers of this code; what was locked stays locked


class Migration(migrations.Migration):
    dependencies = [
        ("changelog", "0005_search"),
        ("experiments", "0002_experiment_probe_experiment_probe_run_a_and_more"),
    ]
    operations = [migrations.RunPython(forward, backward)]
