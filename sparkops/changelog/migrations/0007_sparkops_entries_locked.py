"""Every entry SparkOps writes is locked when written (issue 45, item 6): its actions and their
outcomes ("systemctl restart demo-vllm.service on vm: done"), its observations and its decisions,
not only its observed configuration changes. The triggers are installed again with the wider
test (sparkops/changelog/dbguard.py), and the entries SparkOps already wrote that are still
open are locked now, at their creation."""

from django.db import migrations
from django.db.models.functions import Lower
from django.utils import timezone

from sparkops.changelog import dbguard
from sparkops.changelog.models import SPARKOPS_AUTHOR


def forward(apps, schema_editor):
    dbguard.install(schema_editor)
    Entry = apps.get_model("changelog", "Entry")
    open_ = (
        Entry.objects.annotate(author_lower=Lower("author_name"))
        .filter(locked_at__gt=timezone.now(), author__isnull=True, author_lower=SPARKOPS_AUTHOR.lower())
        .only("pk", "created_at")
    )
    for entry in open_:
        Entry.objects.filter(pk=entry.pk).update(locked_at=entry.created_at)


def backward(apps, schema_editor):
    dbguard.install(schema_editor)  # the triggers of this code; what was locked stays locked


class Migration(migrations.Migration):
    dependencies = [("changelog", "0006_locked_when_pointed_at")]
    operations = [migrations.RunPython(forward, backward)]
