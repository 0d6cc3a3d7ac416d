"""One entry per content and one correction per content and entry, held by the database, so
two imports of one file at the same time cannot both create it (issue 14, item 4).

Rows that a concurrent import already doubled keep their content; the later twins lose only
their fingerprint (derived data), so imports match the first. The append-only triggers are
set aside for that and reinstalled (SQLite also drops them when it rebuilds the table for the
new column)."""
from django.db import migrations, models

from sparkops.changelog import dbguard
from sparkops.changelog.models import content_hash


def triggers_off(apps, schema_editor):
    dbguard.uninstall(schema_editor)


def triggers_on(apps, schema_editor):
    dbguard.install(schema_editor)


def triggers_on_0003(apps, schema_editor):
    dbguard.install(schema_editor, correction_columns=dbguard.CORRECTION_COLUMNS_0003)


def fingerprints(apps, schema_editor):
    from datetime import timezone as dt_tz

    Entry = apps.get_model("changelog", "Entry")
    Correction = apps.get_model("changelog", "Correction")
    seen = set()
    for entry in Entry.objects.exclude(fingerprint="").order_by("pk").only("pk", "fingerprint"):
        if entry.fingerprint in seen:
            Entry.objects.filter(pk=entry.pk).update(fingerprint="")
        seen.add(entry.fingerprint)
    seen = set()
    for c in Correction.objects.select_related("claim").order_by("pk"):
        fp = content_hash(c.corrected_at.astimezone(dt_tz.utc).isoformat(timespec="minutes"),
                          c.claim.position if c.claim_id else None, c.mark, c.text_md.strip())
        if (c.entry_id, fp) not in seen:
            Correction.objects.filter(pk=c.pk).update(content_fingerprint=fp)
        seen.add((c.entry_id, fp))


class Migration(migrations.Migration):
    dependencies = [("changelog", "0003_append_only_triggers")]

    operations = [
        migrations.RunPython(triggers_off, triggers_on_0003),
        migrations.AddField(model_name="correction", name="content_fingerprint",
                            field=models.CharField(blank=True, editable=False, max_length=64)),
        migrations.RunPython(fingerprints, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="entry",
            constraint=models.UniqueConstraint(condition=models.Q(("fingerprint", ""), _negated=True),
                                               fields=("fingerprint",), name="changelog_entry_one_per_content")),
        migrations.AddConstraint(
            model_name="correction",
            constraint=models.UniqueConstraint(condition=models.Q(("content_fingerprint", ""), _negated=True),
                                               fields=("entry", "content_fingerprint"),
                                               name="changelog_correction_one_per_content")),
        migrations.RunPython(triggers_on, triggers_off),
    ]
