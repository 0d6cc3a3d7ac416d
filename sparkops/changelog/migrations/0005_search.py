"""Full-text search of the change log: one search document per entry, indexed by the
database (PostgreSQL: generated tsvector + GIN; SQLite: FTS5). See sparkops/changelog/search.py."""
import django.db.models.deletion
from django.db import migrations, models

from sparkops.changelog import search


def index_sql(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for statement in {"postgresql": search.PG_SQL, "sqlite": search.SQLITE_SQL}.get(vendor, []):
        schema_editor.execute(statement)


def drop_index_sql(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for name in ("changelog_search_ai", "changelog_search_ad", "changelog_search_au"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}")
        schema_editor.execute("DROP TABLE IF EXISTS changelog_search_fts")


def fill(apps, schema_editor):
    Entry = apps.get_model("changelog", "Entry")
    SearchDocument = apps.get_model("changelog", "SearchDocument")
    docs = []
    for e in Entry.objects.prefetch_related("engines", "flags", "claims", "corrections").iterator(chunk_size=500):
        docs.append(SearchDocument(entry_id=e.pk, document=search.document_text(
            title=e.title, body=e.body_md, reason=e.reason, expected=e.expected_effect, units=e.units,
            engines=[x.name for x in e.engines.all()], flags=[f"{f.flag} {f.old} {f.new}" for f in e.flags.all()],
            claims=[c.text for c in e.claims.all()], corrections=[c.text_md for c in e.corrections.all()])))
    SearchDocument.objects.bulk_create(docs, batch_size=500)


class Migration(migrations.Migration):
    dependencies = [("changelog", "0004_one_row_per_content")]

    operations = [
        migrations.CreateModel(
            name="SearchDocument",
            fields=[
                ("entry", models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True,
                                               related_name="search_document", serialize=False,
                                               to="changelog.entry")),
                ("document", models.TextField()),
            ],
        ),
        migrations.RunPython(index_sql, drop_index_sql),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
