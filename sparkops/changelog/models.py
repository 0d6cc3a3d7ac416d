"""The config change log: dated entries, the claims in them, and corrections that sit
beside a claim instead of replacing it.

Append-only is enforced here, not only in views: after a short grace period an entry's
save() refuses, querysets refuse bulk update/delete, and corrections never change once
written. The admin (sparkops/changelog/admin.py) is read-only on top of that. Beneath all
of it the database refuses too: triggers (migration 0003, PostgreSQL and SQLite) reject any
UPDATE or DELETE of a locked entry, of its flags, claims, evidence and engine links, and of
its corrections, whatever path the statement came by (managers, cascades, raw SQL).

"Locked" is one column, Entry.locked_at (written at creation: created_at + the grace period in
force then), so the database can judge it without Django's settings. It only ever moves
earlier: to the moment anything points at the entry (a correction of it, an experiment whose
verdict it records), and to created_at itself for an entry SparkOps wrote (an action it took,
its outcome, an observed configuration change, a decision it recorded): such a record says
what happened as it happened, and nobody edits it afterwards. The database sets both
(dbguard.py), whatever path wrote the row."""

import hashlib
import json
from datetime import datetime, timedelta
from typing import Any, NoReturn

from django.apps import apps
from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from .grammar import format_when

GRACE_DEFAULT_S = 15 * 60
# What marks an entry SparkOps wrote from an observed configuration change
# (sparkops/launch/changelog.py writes them): its author, or — after an export and an
# import, whose author is the importer — the first words of its body. The triggers read the same.
OBSERVED_AUTHOR = "SparkOps"
OBSERVED_MARK = "Observed by SparkOps"
# The author of every entry SparkOps writes itself (no user: who asked is in its text). Entries
# written before it had one name say "sparkops": the name is compared lowercased, here and in the
# triggers. A person's entry always has its user (author_id) until that account is deleted.
SPARKOPS_AUTHOR = OBSERVED_AUTHOR


def written_by_sparkops(*, author_id: int | None, author_name: str | None, body_md: str | None) -> bool:
    """Whether an entry is SparkOps's own record (locked from its insert): its author, or —
    after an export and an import, whose author is the importer — an observed entry's first words."""
    return (author_id is None and (author_name or "").lower() == SPARKOPS_AUTHOR.lower()) or (body_md or "").startswith(
        OBSERVED_MARK
    )


class AppendOnlyError(Exception):
    """Raised for any attempt to change or remove what the log has kept."""


class DuplicateError(AppendOnlyError):
    """The log already holds this very entry or correction (same content): nothing written."""

    def __init__(self, message, existing) -> None:
        super().__init__(message)
        self.existing = existing


def grace_period() -> timedelta:
    # Settings may tune it (tests, or a slower team); the default gives time to fix typos.
    return timedelta(seconds=getattr(settings, "SPARKOPS_CHANGELOG_GRACE_S", GRACE_DEFAULT_S))


class AppendOnlyQuerySet(models.QuerySet):
    """Bulk update/delete would bypass save(); the log has no such path."""

    def update(self, **kwargs: Any) -> NoReturn:
        raise AppendOnlyError(f"{self.model.__name__} rows cannot be bulk-updated; write a correction.")

    def delete(self) -> NoReturn:
        raise AppendOnlyError(f"{self.model.__name__} rows cannot be deleted; write a correction.")

    # Django reads this mark to keep delete() off the manager; mypy types no attributes set on functions.
    delete.queryset_only = True  # type: ignore[attr-defined]


class Entry(models.Model):
    class Kind(models.TextChoices):
        FLAG_CHANGE = "flag_change", "flag change"
        CLAIM = "claim", "claim"
        MEASUREMENT = "measurement", "measurement"
        INCIDENT_NOTE = "incident_note", "incident note"
        DECISION = "decision", "decision"

    effective_at = models.DateTimeField(help_text="When the change took effect (may be in the past)")
    engines = models.ManyToManyField("dashboard.Engine", blank=True, related_name="changelog_entries")
    units = models.TextField(blank=True, help_text="systemd units it concerns, comma-separated")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.FLAG_CHANGE)
    title = models.CharField(max_length=200)
    body_md = models.TextField(blank=True, help_text="Markdown")
    reason = models.TextField(blank=True)
    expected_effect = models.TextField(blank=True)
    # The user may be removed later; the name stays as written.
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="changelog_entries"
    )
    author_name = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    # From then on the row and its children are frozen (the database triggers read this column).
    locked_at = models.DateTimeField(editable=False)
    # "Importing the same file twice creates nothing new": import matches on this.
    fingerprint = models.CharField(max_length=64, db_index=True, editable=False, blank=True)
    incidents = models.ManyToManyField(
        "dashboard.Incident", blank=True, related_name="changelog_entries", help_text="Incidents this entry fixed"
    )

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["-effective_at", "-id"]
        verbose_name_plural = "entries"
        # Timeline and chart annotations read "entries between t0 and t1".
        indexes = [models.Index(fields=["effective_at"], name="changelog_entry_effective")]
        # One entry per content, also under concurrent imports (an entry's fingerprint is
        # empty only between its insert and the write of its flags and claims).
        constraints = [
            models.UniqueConstraint(
                fields=["fingerprint"], condition=~models.Q(fingerprint=""), name="changelog_entry_one_per_content"
            )
        ]

    def __str__(self) -> str:
        return f"{self.effective_at:%Y-%m-%d %H:%M} · {self.title}"

    @property
    def editable_until(self) -> datetime:
        return self.locked_at or self.created_at + grace_period()

    @property
    def is_locked(self) -> bool:
        return timezone.now() >= self.editable_until

    @property
    def by_sparkops(self) -> bool:
        """Written by SparkOps itself (an action, its outcome, an observation, a decision): locked
        from the start."""
        return written_by_sparkops(author_id=self.author_id, author_name=self.author_name, body_md=self.body_md)

    @property
    def is_observed(self) -> bool:
        """Written by SparkOps from an observed configuration change."""
        return (self.body_md or "").startswith(OBSERVED_MARK) or (
            self.by_sparkops and self.kind == Entry.Kind.FLAG_CHANGE
        )

    @property
    def assembling(self) -> bool:
        """An entry SparkOps wrote, between its insert and the write of its fingerprint
        (entry_create and the import write its flags, claims, evidence and engine links in that
        window, in the same transaction): it takes those parts although locked, and nothing else."""
        return self.by_sparkops and not self.fingerprint

    @property
    def lock_reason(self) -> str | None:
        """Why the entry can no longer be edited, in words for the page; None while it can."""
        if not self.is_locked:
            return None
        if self.is_observed:
            return "SparkOps wrote it from an observed configuration change"
        if self.by_sparkops:
            return "SparkOps wrote it, the record of what it did or decided as it happened"
        if self.pk and self.corrections.exists():
            return "a correction points at it"
        experiment = self.pk and _verdict_experiment(self.pk)
        if experiment:
            return f"the verdict of experiment {experiment} points at it"

        return f"its grace period ended {format_when(self.locked_at)}"

    @property
    def locked_why(self) -> str:
        return f"locked: {self.lock_reason}; write a correction instead"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.locked_at is None:
            self.locked_at = self.created_at + grace_period()
        if self.pk and not self._state.adding:
            stored = Entry.objects.filter(pk=self.pk).values_list("created_at", "locked_at", "fingerprint").first()
            if stored is not None and timezone.now() >= stored[1] and not self._completes(stored[2], kwargs):
                raise AppendOnlyError(f"This entry is {Entry.objects.get(pk=self.pk).locked_why}.")
            if stored is not None:
                # created_at and locked_at never move, so the grace cannot be extended
                self.created_at, self.locked_at = stored[:2]
        if self.by_sparkops:  # the triggers do the same, on every path
            self.locked_at = min(self.locked_at, self.created_at)
        super().save(*args, **kwargs)

    def _completes(self, stored_fingerprint: str, kwargs: dict[str, Any]) -> bool:
        """The one write a locked entry takes: an assembling observed entry's fingerprint."""
        return (
            stored_fingerprint == "" and self.by_sparkops and list(kwargs.get("update_fields") or ()) == ["fingerprint"]
        )

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AppendOnlyError("Change-log entries are never deleted; write a correction.")

    def get_absolute_url(self) -> str:

        return reverse("changelog:entry", args=[self.pk])


def _verdict_experiment(entry_id: int) -> int | None:
    """The experiment whose verdict ENTRY_ID records, if any (its id)."""

    if not apps.is_installed("sparkops.experiments"):
        return None
    model = apps.get_model("experiments", "Experiment")
    return model.objects.filter(entry_id=entry_id).values_list("pk", flat=True).first()


class PartOfEntry(models.Model):
    """A row that belongs to an entry's text (its flags, claims, evidence): frozen with the entry.
    save() and delete() refuse once the entry is locked; an entry SparkOps wrote, still being assembled,
    takes new parts (its flags and claims are written after the entry row)."""

    # Every concrete part declares this foreign key (nullable on EvidenceLink).
    entry: "models.ForeignKey[Entry | None, Entry | None]"

    class Meta:
        abstract = True

    def owning_entry(self) -> "Entry | None":
        """The entry whose lock freezes this row (None: no entry's lock applies here)."""
        return self.entry

    def _refuse_if_locked(self, adding: bool = False) -> None:
        entry = self.owning_entry()
        if entry is not None and entry.pk and entry.is_locked and not (adding and entry.assembling):
            raise AppendOnlyError(f"{entry} is {entry.locked_why}.")

    def save(self, *args: Any, **kwargs: Any) -> None:
        self._refuse_if_locked(adding=self._state.adding)
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any):
        self._refuse_if_locked()
        return super().delete(*args, **kwargs)


class FlagChange(PartOfEntry):
    entry = models.ForeignKey(Entry, on_delete=models.CASCADE, related_name="flags")
    position = models.PositiveSmallIntegerField(default=0)
    flag = models.CharField(max_length=120, help_text="e.g. --max-model-len")
    old = models.CharField(max_length=500, blank=True)
    new = models.CharField(max_length=500, blank=True)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["entry", "position", "id"]

    def __str__(self) -> str:
        return f"{self.flag}: {self.old} → {self.new}"


class Claim(PartOfEntry):
    """One statement in an entry, optionally with a number the ledger can check later."""

    class Metric(models.TextChoices):
        CONCURRENCY = "concurrency", "concurrency at the window (×)"
        POOL_TOKENS = "pool_tokens", "KV pool (tokens)"
        KV_MEMORY_GIB = "kv_memory_gib", "KV memory (GiB)"
        TOKENS_PER_GIB = "tokens_per_gib", "tokens per GiB"

    entry = models.ForeignKey(Entry, on_delete=models.CASCADE, related_name="claims")
    position = models.PositiveSmallIntegerField(default=0)
    text = models.TextField()
    metric = models.CharField(max_length=20, choices=Metric.choices, blank=True)
    predicted = models.FloatField(null=True, blank=True)
    window = models.PositiveIntegerField(null=True, blank=True, help_text="--max-model-len the prediction is for")
    engine = models.ForeignKey("dashboard.Engine", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    tolerance_pct = models.FloatField(default=1.0, help_text="A measurement further off than this invites a correction")

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["entry", "position", "id"]

    def __str__(self) -> str:
        return self.text[:80]

    @property
    def has_prediction(self) -> bool:
        return bool(self.metric) and self.predicted is not None


class Correction(models.Model):
    """Written against an entry or one claim in it; shown beside it, never instead of it."""

    class Mark(models.TextChoices):
        NONE = "", "corrected"
        WITHDRAWN = "withdrawn", "withdrawn"
        SUPERSEDED = "superseded", "superseded"

    entry = models.ForeignKey(Entry, on_delete=models.PROTECT, related_name="corrections")
    claim = models.ForeignKey(Claim, null=True, blank=True, on_delete=models.PROTECT, related_name="corrections")
    corrected_at = models.DateTimeField(default=timezone.now, help_text="The correction's own date")
    text_md = models.TextField()
    mark = models.CharField(max_length=12, choices=Mark.choices, blank=True, default="")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="changelog_corrections"
    )
    author_name = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    # fingerprint() as written, so one correction per content and entry holds in the database.
    content_fingerprint = models.CharField(max_length=64, editable=False, blank=True)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["corrected_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["entry", "content_fingerprint"],
                condition=~models.Q(content_fingerprint=""),
                name="changelog_correction_one_per_content",
            )
        ]

    def __str__(self) -> str:
        return f"Correction {self.corrected_at:%Y-%m-%d} to {self.entry_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk and not self._state.adding:
            raise AppendOnlyError("A correction is never edited; write another correction.")
        if self.claim is not None and self.claim.entry_id != self.entry_id:
            raise AppendOnlyError("The claim does not belong to the corrected entry.")
        self.content_fingerprint = self.fingerprint()
        twin = Correction.objects.filter(entry_id=self.entry_id, content_fingerprint=self.content_fingerprint).first()
        if twin is not None:
            raise DuplicateError(f"This correction is already beside the entry ({twin}); nothing was added.", twin)
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AppendOnlyError("Corrections are never deleted.")

    def fingerprint(self) -> str:
        return content_hash(
            self.corrected_at.isoformat(timespec="minutes"),
            self.claim.position if self.claim is not None else None,
            self.mark,
            self.text_md.strip(),
        )


class EvidenceLink(PartOfEntry):
    class Kind(models.TextChoices):
        BENCHMARK_RUN = "benchmark_run", "benchmark run"
        ALERT_EVENT = "alert_event", "alert event"
        CHART_WINDOW = "chart_window", "chart window"
        URL = "url", "URL"

    entry = models.ForeignKey(Entry, null=True, blank=True, on_delete=models.CASCADE, related_name="evidence")
    correction = models.ForeignKey(Correction, null=True, blank=True, on_delete=models.CASCADE, related_name="evidence")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.URL)
    label = models.CharField(max_length=200, blank=True)
    url = models.CharField(max_length=500, blank=True, help_text="For URLs; other kinds get theirs from the reference")
    # Benchmark run or alert event id; kept as a plain number so the log survives their pruning.
    ref_id = models.PositiveIntegerField(null=True, blank=True)
    window_start = models.DateTimeField(null=True, blank=True)
    window_end = models.DateTimeField(null=True, blank=True)
    engine = models.ForeignKey("dashboard.Engine", null=True, blank=True, on_delete=models.PROTECT, related_name="+")

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(entry__isnull=True) ^ models.Q(correction__isnull=True), name="evidence_one_owner"
            )
        ]

    def __str__(self) -> str:
        return self.label or self.url or f"{self.get_kind_display()} {self.ref_id or ''}".strip()

    def owning_entry(self) -> "Entry | None":
        """The entry it is evidence for; None for a correction's evidence, which save() below guards."""
        return self.entry if self.entry_id else None

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.correction_id and self.pk and not self._state.adding:
            raise AppendOnlyError("A correction's evidence is never edited.")
        super().save(*args, **kwargs)


class EntryRevision(models.Model):
    """What an entry said before an edit inside its grace period; shown on the entry page."""

    entry = models.ForeignKey(Entry, on_delete=models.CASCADE, related_name="revisions")
    revised_at = models.DateTimeField(default=timezone.now)
    revised_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    snapshot = models.JSONField(help_text="The entry as it was before this edit")

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["revised_at", "id"]

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk and not self._state.adding:
            raise AppendOnlyError("Edit history is never rewritten.")
        super().save(*args, **kwargs)


class SearchDocument(models.Model):
    """The text an entry is found by (title, body, reason, flags, claims, its corrections'
    text): derived, rewritten whenever the entry or a correction to it is written, so it is
    not append-only. The database indexes it: a GIN-indexed tsvector column on PostgreSQL, an
    FTS5 table on SQLite (migration changelog 0005; sparkops/changelog/search.py)."""

    entry = models.OneToOneField(Entry, primary_key=True, on_delete=models.CASCADE, related_name="search_document")
    document = models.TextField()


def content_hash(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
