"""A sweep as JSON (what `sparkops bench sweep --json` prints), CSV and Markdown in the field
report's table shape (concurrency: aggregate decode ± sd, per-stream, aggregate prefill, time to
first response; depth: decode, time to first token)."""

from __future__ import annotations

from dashboard.csv_export import csv_text

from .spec import RunSpec

CELL_KEYS = (
    "value",
    "run",
    "status",
    "reason",
    "tainted",
    "aggregate_decode_tokens_per_s",
    "aggregate_decode_tokens_per_s_sd",
    "per_stream_decode_tokens_per_s",
    "per_stream_decode_tokens_per_s_sd",
    "aggregate_prefill_tokens_per_s",
    "aggregate_prefill_tokens_per_s_sd",
    "ttft_ms",
    "ttft_p90_ms",
    "ttft_ms_sd",
    "requests",
    "ok",
    "error_share",
    "errors",
)


def sweep_summary(sweep):
    spec = RunSpec.from_dict(sweep.base)
    ran = [row["value"] for row in sweep.table]
    return {
        "sweep": sweep.pk,
        "engine": sweep.engine.name,
        "axis": sweep.axis,
        "values": sweep.values,
        "params_hash": sweep.params_hash,
        "status": sweep.status,
        "reason": sweep.reason,
        "stop_reason": sweep.stop_reason,
        "fixed": fixed_params(spec, sweep.axis),
        "cells": [{k: row.get(k) for k in CELL_KEYS} for row in sweep.table],
        "not_run": [v for v in sweep.values if v not in ran],
    }


def fixed_params(spec, axis):
    keys = ("workload", "mode", "depth", "concurrency", "output_tokens", "reps", "sampling", "thinking", "force")
    return {k: getattr(spec, k) for k in keys if k != axis}


def sweep_csv(sweep):
    columns = [k if k != "value" else sweep.axis for k in CELL_KEYS]
    rows = []
    for row in sweep.table:
        cells = [row.get(k) for k in CELL_KEYS]
        cells[-1] = "; ".join(f"{k} {v}" for k, v in (row.get("errors") or {}).items())
        rows.append(cells)
    return csv_text(columns, rows)


def number(value, digits=1):
    """VALUE with thousands commas and DIGITS decimals, or a dash when there is none (tables, CLI lines)."""
    return "—" if value is None else f"{value:,.{digits}f}"


def _with_sd(value, sd):
    return number(value) if sd is None or value is None else f"{value:,.1f} ± {sd:,.1f}"


def _time(ms):
    if ms is None:
        return "—"
    return f"{ms / 1000:,.1f} s" if ms >= 1000 else f"{ms:,.0f} ms"


def workload_line(sweep):
    spec = RunSpec.from_dict(sweep.base)
    fixed = []
    if sweep.axis != "depth":
        fixed.append(f"prompt {spec.depth:,} tokens")
    if sweep.axis != "concurrency":
        fixed.append(f"concurrency {spec.concurrency}")
    fixed += [f"decode {spec.output_tokens:,} (exact)", f"{spec.reps} runs per cell", f"{spec.mode}"]
    when = (sweep.started_at or sweep.created_at).date().isoformat()
    return f"{sweep.engine.name}, {when}, {spec.workload}, " + ", ".join(fixed) + f", hash {sweep.params_hash}:"


def sweep_markdown(sweep):
    if sweep.axis == "concurrency":
        head = [
            "concurrency",
            "aggregate decode tok/s (± sd)",
            "per-stream tok/s",
            "aggregate prefill tok/s",
            "time to first response",
        ]
    else:
        head = ["context depth", "decode tok/s (± sd)", "time to first token"]
    lines = [workload_line(sweep), "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in sweep.table:
        lines.append("| " + " | ".join(_md_cells(sweep.axis, row, len(head))) + " |")
    if sweep.stop_reason:
        lines.append(f"Stopped early: {sweep.stop_reason}.")
    return "\n".join(lines) + "\n"


def _md_cells(axis, row, width):
    value = f"{row['value']:,}"
    if not row.get("ok"):
        return [value, f"{row['status']}: {row.get('reason') or ', '.join(row.get('errors') or {})}"] + [""] * (
            width - 2
        )
    errors = "; ".join(f"{k} ×{v}" for k, v in (row.get("errors") or {}).items())
    tail = f" ({errors})" if errors else ""
    if axis == "concurrency":
        return [
            value,
            _with_sd(row["aggregate_decode_tokens_per_s"], row["aggregate_decode_tokens_per_s_sd"]) + tail,
            number(row["per_stream_decode_tokens_per_s"]),
            number(row["aggregate_prefill_tokens_per_s"], 0),
            _time(row["ttft_ms"]),
        ]
    return [
        value,
        _with_sd(row["per_stream_decode_tokens_per_s"], row["per_stream_decode_tokens_per_s_sd"]) + tail,
        _time(row["ttft_ms"]),
    ]


def chart_data(sweep):
    """The sweep page's Plotly data: aggregate and per-stream decode (and TTFT) against the axis."""
    rows = [r for r in sweep.table if r.get("ok")]
    return {
        "axis": sweep.axis,
        "x": [r["value"] for r in rows],
        "aggregate": [r["aggregate_decode_tokens_per_s"] for r in rows],
        "aggregate_sd": [r["aggregate_decode_tokens_per_s_sd"] or 0 for r in rows],
        "per_stream": [r["per_stream_decode_tokens_per_s"] for r in rows],
        "ttft_ms": [r["ttft_ms"] for r in rows],
    }
