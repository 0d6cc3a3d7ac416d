"""The change log exported: the Markdown file (the format `parse` reads) and JSON, every entry
oldest first with its engines, flags, claims, evidence and corrections. The header keys, their
order and the blank lines are fixed so export → import → export is byte-identical (README,
"Change log")."""

import json

from .grammar import EvidenceLine, Prediction, format_when
from .models import Claim, Correction, Entry, EvidenceLink, FlagChange


def _entries_for_export():
    """Every entry, oldest first, with its parts attached as lists (ex_engines, ex_flags,
    ex_claims, ex_evidence, ex_corrections; a correction's ex_evidence): one query per table,
    grouped here, since prefetch_related would spend most of an export building per-entry querysets."""
    from collections import defaultdict

    entries = list(Entry.objects.order_by("effective_at", "id"))
    engines, flags, claims, evidence, corrections, corr_evidence = (defaultdict(list) for _ in range(6))
    for entry_id, name in Entry.engines.through.objects.values_list("entry_id", "engine__name"):
        engines[entry_id].append(name)
    for f in FlagChange.objects.order_by("entry_id", "position", "id"):
        flags[f.entry_id].append(f)
    claim_by_pk = {}
    for c in Claim.objects.select_related("engine").order_by("entry_id", "position", "id"):
        claims[c.entry_id].append(c)
        claim_by_pk[c.pk] = c
    for ev in EvidenceLink.objects.order_by("id"):
        (evidence[ev.entry_id] if ev.entry_id else corr_evidence[ev.correction_id]).append(ev)
    for c in Correction.objects.order_by("corrected_at", "id"):
        c.claim = claim_by_pk.get(c.claim_id) if c.claim_id else None
        c.ex_evidence = corr_evidence[c.pk]
        corrections[c.entry_id].append(c)
    for e in entries:
        e.ex_engines, e.ex_flags, e.ex_claims = sorted(engines[e.pk]), flags[e.pk], claims[e.pk]
        e.ex_evidence, e.ex_corrections = evidence[e.pk], corrections[e.pk]
    return entries


def export_markdown():
    parts = ["# SparkOps change log\n"]
    parts += [_entry_markdown(e) for e in _entries_for_export()]
    return "\n".join(parts)


def _entry_markdown(e):
    lines = [f"## {format_when(e.effective_at)} · {e.title}"]
    lines += [f"Engines: {', '.join(e.ex_engines)}"] if e.ex_engines else []
    lines += [f"Units: {e.units}"] if e.units else []
    lines.append(f"Kind: {e.kind}")
    lines += [f"Flag: {f}" for f in e.ex_flags]
    lines += [f"Reason: {e.reason}"] if e.reason else []
    lines += [f"Expected: {e.expected_effect}"] if e.expected_effect else []
    for c in e.ex_claims:
        lines.append(f"Claim: {c.text}")
        if c.has_prediction:
            lines.append(f"Prediction: {_prediction_text(c)}")
    lines += [f"Evidence: {_evidence_text(ev)}" for ev in e.ex_evidence]
    lines += ["", e.body_md] if e.body_md else []
    for c in e.ex_corrections:
        lines += ["", *_correction_markdown(c)]
    return "\n".join(lines) + "\n"


def _prediction_text(c):
    return str(Prediction(c.metric, c.predicted, c.window, c.engine.name if c.engine_id else None))


def _evidence_text(ev):
    return str(EvidenceLine(ev.kind, ev.url, ev.ref_id, ev.window_start, ev.window_end))


def _correction_markdown(c):
    opts = ([f"claim {c.claim.position + 1}"] if c.claim_id else []) + ([c.mark] if c.mark else [])
    head = f"Correction {format_when(c.corrected_at)}" + (f" ({', '.join(opts)})" if opts else "") + ":"
    first, *more = c.text_md.split("\n")
    out = [f"> {head} {first}"] + [f"> {line}" if line else ">" for line in more]
    return out + [f"> Evidence: {_evidence_text(ev)}" for ev in c.ex_evidence]


def export_json():
    return json.dumps([_entry_json(e) for e in _entries_for_export()], indent=2, ensure_ascii=False) + "\n"


def _entry_json(e):
    return {
        "id": e.pk,
        "effective_at": e.effective_at.isoformat(),
        "title": e.title,
        "kind": e.kind,
        "engines": e.ex_engines,
        "units": e.units,
        "body_md": e.body_md,
        "reason": e.reason,
        "expected_effect": e.expected_effect,
        "author": e.author_name,
        "created_at": e.created_at.isoformat(),
        "flags": [{"flag": f.flag, "old": f.old, "new": f.new} for f in e.ex_flags],
        "claims": [
            {
                "position": c.position + 1,
                "text": c.text,
                "metric": c.metric or None,
                "predicted": c.predicted,
                "window": c.window,
                "engine": c.engine.name if c.engine_id else None,
            }
            for c in e.ex_claims
        ],
        "evidence": [_evidence_text(ev) for ev in e.ex_evidence],
        "corrections": [
            {
                "corrected_at": c.corrected_at.isoformat(),
                "claim": c.claim.position + 1 if c.claim_id else None,
                "mark": c.mark or None,
                "text_md": c.text_md,
                "author": c.author_name,
                "evidence": [_evidence_text(ev) for ev in c.ex_evidence],
            }
            for c in e.ex_corrections
        ],
    }
