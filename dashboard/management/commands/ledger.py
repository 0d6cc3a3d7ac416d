"""`sparkops ledger kv add --engine NAME --date YYYY-MM-DD[THH:MM] --util U --kv-gib G
--pool-tokens N --window W [--note TEXT]` and `sparkops ledger kv list [--json]`.

`add` validates with the Ledgers page's form (KVPoolEntryForm): the same messages, nothing saved
on an error. An engine name SparkOps does not watch becomes a retired engine record, as the
change-log import does (engine_lifecycle.retired_record); on an error it is not kept either."""

import json
from argparse import ArgumentParser
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError
from django.db import transaction

from dashboard.engine_lifecycle import retired_record
from dashboard.management.base import CliCommand
from dashboard.models import Engine, KVPoolEntry
from dashboard.models.ledgers import GIB
from sparkops.changelog.forms import KVPoolEntryForm
from sparkops.changelog.grammar import format_when


class _Refused(Exception):
    pass


def row_json(r):
    return {
        "id": r.pk,
        "date": format_when(r.recorded_at),
        "recorded_at": r.recorded_at.isoformat(),
        "engine": r.engine.name,
        "util": r.memory_share,
        "kv_gib": round(r.kv_memory_bytes / GIB, 4) if r.kv_memory_bytes else None,
        "pool_tokens": r.pool_tokens,
        "window": r.window,
        "concurrency": r.concurrency,
        "tokens_per_gib": round(r.tokens_per_gib) if r.tokens_per_gib else None,
        "source": r.source,
        "note": r.note,
    }


class Command(CliCommand):
    help = "The KV-pool ledger from the command line: add a row (as the Ledgers page's form does) or list them."

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="ledger", required=True)
        kv = sub.add_parser("kv", help="the KV-pool ledger")
        kvsub = kv.add_subparsers(dest="action", required=True)
        add = kvsub.add_parser("add", help="add a row")
        add.add_argument("--engine", required=True, help="engine name; an unknown one is kept as a retired engine")
        add.add_argument("--date", required=True, help="YYYY-MM-DD or YYYY-MM-DDTHH:MM (site time zone)")
        add.add_argument("--util", required=True, help="--gpu-memory-utilization, 0–1")
        add.add_argument("--kv-gib", required=True, help="KV memory in GiB, as vLLM printed it")
        add.add_argument("--pool-tokens", required=True, help="KV pool in tokens")
        add.add_argument("--window", required=True, help="--max-model-len")
        add.add_argument("--note", default="")
        add.add_argument("--json", action="store_true", help="print the row as JSON")
        lst = kvsub.add_parser("list", help="list the rows, oldest first")
        lst.add_argument("--json", action="store_true")

    def handle(self, *args: Any, ledger, action, **opts: Any) -> None:
        getattr(self, f"do_{ledger}_{action}")(**opts)

    def do_kv_add(self, *, engine, date, util, kv_gib, pool_tokens, window, note, json: bool, **_: Any):
        data = {
            "recorded_at": date,
            "memory_share": util,
            "kv_memory_gib": kv_gib,
            "pool_tokens": pool_tokens.replace(",", ""),
            "window": window.replace(",", ""),
            "concurrency": "",
            "note": note,
        }
        created = False
        try:
            with transaction.atomic():
                known = Engine.objects.filter(name=engine).first()
                if known is None:
                    try:
                        known, created = retired_record(engine), True
                    except ValidationError as exc:
                        raise CommandError(f"--engine: {' '.join(exc.messages).rstrip('.')}; nothing saved") from None
                form = KVPoolEntryForm(data={**data, "engine": known.pk})
                if not form.is_valid():
                    raise _Refused(_errors(form))
                row = form.save()
        except _Refused as exc:
            raise CommandError(f"{exc}; nothing saved") from None
        if json:
            self.stdout.write(_dumps(row_json(row)))
            return
        retired = " (a retired engine record: SparkOps does not watch it)" if created else ""
        self.stdout.write(
            f"added #{row.pk}: {row.engine.name}{retired} {format_when(row.recorded_at)} util {row.memory_share} · "
            f"{row.pool_tokens:,} tokens in {row.kv_memory_bytes / GIB:.2f} GiB · {row.concurrency}× at {row.window:,}"
        )

    def do_kv_list(self, *, json: bool, **_: Any) -> None:
        rows = KVPoolEntry.objects.select_related("engine").order_by("recorded_at", "id")
        if json:
            self.stdout.write(_dumps([row_json(r) for r in rows]))
            return
        for r in rows:
            d = row_json(r)
            self.stdout.write(
                f"#{d['id']:<5} {d['date']:<16} {d['engine']:<20} util {d['util']}  "
                f"{d['kv_gib'] if d['kv_gib'] is not None else '—'} GiB  {d['pool_tokens'] or 0:>10,} tokens  "
                f"window {d['window'] or 0:,}  {d['concurrency']}×  {d['tokens_per_gib'] or '—'} tok/GiB  {d['note']}"
            )


FIELD_NAMES = {
    "recorded_at": "--date",
    "memory_share": "--util",
    "kv_memory_gib": "--kv-gib",
    "pool_tokens": "--pool-tokens",
    "window": "--window",
    "note": "--note",
    "engine": "--engine",
}


def _errors(form):
    return "; ".join(
        f"{FIELD_NAMES.get(f, 'error') if f != '__all__' else 'error'}: {e}"
        for f, errs in form.errors.items()
        for e in errs
    )


def _dumps(obj):
    return json.dumps(obj, indent=2, ensure_ascii=False)
