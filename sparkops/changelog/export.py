"""The change log exported: the Markdown file (the format `parse` reads) and JSON, every entry
oldest first with its engines, flags, claims, evidence and corrections. The header keys, their
order and the blank lines are fixed so export → import → export is byte-identical (docs/changelog.md,
"The Markdown format")."""

import json
from collections import defaultdict
from dataclasses import dataclass

from .grammar import EvidenceLine, Prediction, format_when
from .models import Claim, Correction, Entry, EvidenceLink, FlagChange


@dataclass
class _ExportedCorrection:
    correction: Correction
    claim: Claim | None
    evidence: list[EvidenceLink]


@dataclass
class _ExportedEntry:
    entry: Entry
    engines: list[str]
    flags: list[FlagChange]
    claims: list[Claim]
    evidence: list[EvidenceLink]
    corrections: list[_ExportedCorrection]


def _entries_for_export() -> list[_ExportedEntry]:
    """Every entry, oldest first, with its parts as lists: one query per table, grouped here,
    since prefetch_related would spend most of an export building per-entry querysets."""
    entries = list(Entry.objects.order_by("effective_at", "id"))
    engines: defaultdict[int, list[str]] = defaultdict(list)
    flags: defaultdict[int, list[FlagChange]] = defaultdict(list)
    claims: defaultdict[int, list[Claim]] = defaultdict(list)
    evidence: defaultdict[int, list[EvidenceLink]] = defaultdict(list)
    corr_evidence: defaultdict[int | None, list[EvidenceLink]] = defaultdict(list)
    corrections: defaultdict[int, list[_ExportedCorrection]] = defaultdict(list)
    for entry_id, name in Entry.engines.through.objects.values_list("entry_id", "engine__name"):
        engines[entry_id].append(name)
    for f in FlagChange.objects.order_by("entry_id", "position", "id"):
        flags[f.entry_id].append(f)
    claim_by_pk = {}
    for claim in Claim.objects.select_related("engine").order_by("entry_id", "position", "id"):
        claims[claim.entry_id].append(claim)
        claim_by_pk[claim.pk] = claim
    for ev in EvidenceLink.objects.order_by("id"):
        (evidence[ev.entry_id] if ev.entry_id else corr_evidence[ev.correction_id]).append(ev)
    for c in Correction.objects.order_by("corrected_at", "id"):
        claimed = claim_by_pk.get(c.claim_id) if c.claim_id else None
        corrections[c.entry_id].append(_ExportedCorrection(c, claimed, corr_evidence[c.pk]))
    return [
        _ExportedEntry(e, sorted(engines[e.pk]), flags[e.pk], claims[e.pk], evidence[e.pk], corrections[e.pk])
        for e in entries
    ]


def export_markdown() -> str:
    parts = ["# SparkOps change log\n"]
    parts += [_entry_markdown(e) for e in _entries_for_export()]
    return "\n".join(parts)


def _entry_markdown(x: _ExportedEntry) -> str:
    e = x.entry
    lines = [f"## {format_when(e.effective_at)} · {e.title}"]
    lines += [f"Engines: {', '.join(x.engines)}"] if x.engines else []
    lines += [f"Units: {e.units}"] if e.units else []
    lines.append(f"Kind: {e.kind}")
    lines += [f"Flag: {f}" for f in x.flags]
    lines += [f"Reason: {e.reason}"] if e.reason else []
    lines += [f"Expected: {e.expected_effect}"] if e.expected_effect else []
    for c in x.claims:
        lines.append(f"Claim: {c.text}")
        if c.has_prediction:
            lines.append(f"Prediction: {_prediction_text(c)}")
    lines += [f"Evidence: {_evidence_text(ev)}" for ev in x.evidence]
    lines += ["", e.body_md] if e.body_md else []
    for xc in x.corrections:
        lines += ["", *_correction_markdown(xc)]
    return "\n".join(lines) + "\n"


def _prediction_text(c):
    return str(Prediction(c.metric, c.predicted, c.window, c.engine.name if c.engine_id else None))


def _evidence_text(ev: EvidenceLink) -> str:
    return str(EvidenceLine(ev.kind, ev.url, ev.ref_id, ev.window_start, ev.window_end))


def _correction_markdown(xc: _ExportedCorrection) -> list[str]:
    c = xc.correction
    opts = ([f"claim {xc.claim.position + 1}"] if xc.claim is not None else []) + ([c.mark] if c.mark else [])
    head = f"Correction {format_when(c.corrected_at)}" + (f" ({', '.join(opts)})" if opts else "") + ":"
    first, *more = c.text_md.split("\n")
    out = [f"> {head} {first}"] + [f"> {line}" if line else ">" for line in more]
    return out + [f"> Evidence: {_evidence_text(ev)}" for ev in xc.evidence]


def export_json() -> str:
    return json.dumps([_entry_json(e) for e in _entries_for_export()], indent=2, ensure_ascii=False) + "\n"


def _entry_json(x: _ExportedEntry) -> dict:
    e = x.entry
    return {
        "id": e.pk,
        "effective_at": e.effective_at.isoformat(),
        "title": e.title,
        "kind": e.kind,
        "engines": x.engines,
        "units": e.units,
        "body_md": e.body_md,
        "reason": e.reason,
        "expected_effect": e.expected_effect,
        "author": e.author_name,
        "created_at": e.created_at.isoformat(),
        "flags": [{"flag": f.flag, "old": f.old, "new": f.new} for f in x.flags],
        "claims": [
            {
                "position": c.position + 1,
                "text": c.text,
                "metric": c.metric or None,
                "predicted": c.predicted,
                "window": c.window,
                "engine": c.engine.name if c.engine is not None else None,
            }
            for c in x.claims
        ],
        "evidence": [_evidence_text(ev) for ev in x.evidence],
        "corrections": [
            {
                "corrected_at": xc.correction.corrected_at.isoformat(),
                "claim": xc.claim.position + 1 if xc.claim is not None else None,
                "mark": xc.correction.mark or None,
                "text_md": xc.correction.text_md,
                "author": xc.correction.author_name,
                "evidence": [_evidence_text(ev) for ev in xc.evidence],
            }
            for xc in x.corrections
        ],
    }
