"""What `sparkops bench` and `sparkops probe` share: a command whose actions are its `do_<action>`
methods, a saved profile found by name, running a spec now and printing its summary, and listing a
kind's profiles with their last run. Each command keeps its own arguments, its ad-hoc spec and how
it prints one summary or one row as text."""

import json
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from django.core.management.base import CommandError

from dashboard.management.base import CliCommand, require_counted

from .kinds import Kind

Row = dict[str, Any]


class Out(Protocol):
    """A command's stdout."""

    def write(self, msg: str) -> None: ...


class KindCommand(CliCommand):
    """A kind's command: KIND its declaration, PROFILE_NOUN what it calls a profile in its messages."""

    KIND: ClassVar[Kind]
    PROFILE_NOUN: ClassVar[str] = "profile"

    def handle(self, *args: Any, action: str, **opts: Any) -> None:
        if action != "list":  # every other action sends SparkOps's own requests to an engine
            require_counted()
        getattr(self, f"do_{action}")(**opts)

    def saved(self, name: str) -> tuple[Any, Any, Any]:
        """(engine, spec, profile) of the profile NAME; a CommandError that says where to look when none is."""
        profile = self.KIND.profile_model.objects.select_related("engine").filter(name=name).first()
        if profile is None:
            raise CommandError(f"no {self.PROFILE_NOUN} named {name!r} (see `sparkops {self.KIND.label} list`)")
        return profile.engine, profile.spec(), profile


def run_now(
    out: Out, kind: Kind, *, engine: Any, spec: Any, profile: Any, as_json: bool, text: Callable[[Row], None]
) -> None:
    """Run SPEC (of PROFILE, or ad hoc) on ENGINE now, in this process, and print its summary: as
    JSON, or by TEXT. A run that did not end done is a CommandError, after its summary."""
    run = kind.run_execute(
        run=kind.run_create(engine=engine, spec=spec, profile=profile, trigger=kind.run_model.Trigger.CLI)
    )
    summary = kind.run_summary(run)
    if as_json:
        out.write(json.dumps(summary, indent=2))
    else:
        text(summary)
    if run.status != run.Status.DONE:
        raise CommandError(f"{kind.run_noun.lower()} {run.pk} {run.status}: {run.reason}")


def profiles_list(
    out: Out,
    kind: Kind,
    *,
    as_json: bool,
    row: Callable[[Any], Row],
    figures: Callable[[Any], Row],
    line: Callable[[Row], str],
    empty: str,
) -> None:
    """The kind's profiles, each as ROW(profile) and its last run with the run's FIGURES(run)
    (`MeasuredRun.list_row`): as JSON, or a LINE each (EMPTY when there is none)."""
    rows = []
    for profile in kind.profile_model.objects.select_related("engine", "schedule__crontab"):
        last = profile.last_run()
        rows.append({**row(profile), "last_run": None if last is None else last.list_row(**figures(last))})
    if as_json:
        out.write(json.dumps(rows, indent=2))
        return
    if not rows:
        out.write(empty)
    for r in rows:
        out.write(line(r))
