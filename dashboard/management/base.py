"""The base of SparkOps's own commands that do one thing and return (`sparkops engine list`,
`sparkops alerts …`, `sparkops launch`, …): they skip Django's system checks, as Django's own
`shell` and `dbshell` do. The checks import every view to check the URLconf, which a command that
reads or writes a few rows never uses: 0.3 s of a core of each run (`sparkops engine list --json`:
0.83 → 0.52 s here), paid by every script and every unit's `ExecStart=sparkops launch`. The
processes that serve (`sparkops up`, `sparkops worker`, the web server) and `sparkops check` still
run them, and a bad setting still stops any command (sparkops/env.py parses them when settings load)."""

from typing import ClassVar

from django.core.management.base import BaseCommand, CommandError


class CliCommand(BaseCommand):
    requires_system_checks: ClassVar[list[str]] = []  # type: ignore[misc]


def require_counted() -> None:
    """Refuse, before anything is sent, a command whose requests to an engine could not be counted
    as SparkOps's own (no stack of this install is known from this shell): the stack would judge
    them as the operator's traffic."""
    from sparkops.collectors.own import refusal

    problem = refusal()
    if problem:
        raise CommandError(problem)
