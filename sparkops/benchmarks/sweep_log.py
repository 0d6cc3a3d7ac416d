"""'Attach to the change log': a sweep's cells become `Evidence: run:ID` lines of an entry.

Entries are append-only: evidence can be added to an entry still in its grace period; otherwise
(and by default) a new `measurement` entry carries the table and the evidence."""

from django.urls import reverse
from django.utils import timezone

from sparkops.changelog.grammar import EvidenceLine
from sparkops.changelog.models import DuplicateError, EvidenceLink
from sparkops.changelog.services import entry_create

from .sweep_export import sweep_markdown


class AttachError(ValueError):
    pass


def _evidence(sweep):
    """run:ID per cell. The sweep page is linked from the body, not as evidence: a relative URL would not
    survive the change log's Markdown export and import (evidence URLs are absolute)."""
    return [EvidenceLine("benchmark_run", ref_id=row["run"]) for row in sweep.table if row.get("run")]


def sweep_attach(*, sweep, entry=None, user=None):
    """Add every cell's run as evidence to ENTRY (still editable), or to a new measurement entry."""
    if not sweep.table:
        raise AttachError("this sweep has no finished cell to attach yet")
    evidence = _evidence(sweep)
    if entry is None:
        values = ", ".join(f"{v:,}" for v in sweep.values)
        try:
            return entry_create(
                author=user,
                effective_at=sweep.finished_at or timezone.now(),
                title=f"Sweep {sweep.pk}: {sweep.axis} {values} on {sweep.engine.name}",
                kind="measurement",
                engines=[sweep.engine],
                body_md=f"[Sweep {sweep.pk}]({reverse('bench:sweep', args=[sweep.pk])}), every cell's run as evidence.\n\n"
                + sweep_markdown(sweep),
                evidence=evidence,
            )
        except DuplicateError as exc:
            raise AttachError(f"already in the change log as entry #{exc.existing.pk}") from None
    if entry.is_locked:
        raise AttachError(f"{entry} is past its grace period: attach to a new entry, or write a correction")
    have = set(entry.evidence.values_list("kind", "ref_id", "url"))
    for ev in evidence:
        if (ev.kind, ev.ref_id, ev.url) not in have:
            EvidenceLink.objects.create(entry=entry, kind=ev.kind, ref_id=ev.ref_id, url=ev.url)
    return entry
