"""`sparkops changelog import FILE [--dry-run]` and `sparkops changelog export [--format md|json]`."""

import sys
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from dashboard.management.base import CliCommand
from sparkops.changelog.export import export_json, export_markdown
from sparkops.changelog.importer import import_log, plan_import
from sparkops.changelog.parse import LogSyntaxError


class Command(CliCommand):
    help = "Import or export the config change log as Markdown (format: docs/changelog.md, 'The Markdown format')."

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        imp = sub.add_parser("import", help="import a Markdown change log")
        imp.add_argument("file", help="path to the Markdown file, or - for stdin")
        imp.add_argument("--dry-run", action="store_true", help="report what would be created; write nothing")
        imp.add_argument("--author", default=None, help="username to record as the author (default: 'import')")
        exp = sub.add_parser("export", help="write the log to stdout")
        exp.add_argument("--format", choices=["md", "json"], default="md")

    def handle(self, *args: Any, action, **opts: Any) -> None:
        getattr(self, f"do_{action}")(**opts)

    def do_import(self, *, file, dry_run, author, **_: Any):
        text = self._read(file)
        user = self._user(author)
        try:
            if dry_run:
                plan = plan_import(text)
            else:  # one transaction; planned again if a concurrent import of it won the race
                plan = import_log(text, author=user, author_name=user.get_username() if user else "import")
        except LogSyntaxError as exc:
            raise CommandError(f"{file}: {exc}; nothing imported") from None
        for name, line in sorted(plan.new_engines.items()):
            self.stdout.write(
                f"  + engine  line {line}: {name} (retired: known from the log, not polled; "
                f"'sparkops engine add {name} …' watches it)"
            )
        for p in plan.new_entries:
            self.stdout.write(f"  + entry  line {p.line}: {p.effective_at:%Y-%m-%d %H:%M} · {p.title}")
        for _, c in plan.new_corrections:
            self.stdout.write(f"  + correction  line {c.line}: {c.corrected_at:%Y-%m-%d}")
        for line, note in plan.notes:
            self.stdout.write(f"  note  line {line}: {note}")
        if dry_run:
            self.stdout.write(f"dry run: would create {plan.summary()}")
            return
        self.stdout.write(f"imported: {plan.summary()}")

    def do_export(self, *, format, **_: Any) -> None:
        self.stdout.write(export_json() if format == "json" else export_markdown(), ending="")

    def _read(self, file):

        if file == "-":
            return sys.stdin.read()
        try:
            return Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {file}: {exc}") from None

    def _user(self, username):
        if username is None:
            return None
        try:
            return get_user_model().objects.get(username=username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user {username!r}") from None
