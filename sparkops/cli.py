"""The `sparkops` console script: every subcommand is a Django management command."""

import importlib.util
import os
import sys
from pathlib import Path

from sparkops.install import install_missing
from sparkops.lifeline import watch_parent

BASE_DIR = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    if argv[1:] == ["--version"]:  # Django's own --version would print Django's
        from sparkops.version import __version__

        print(f"sparkops {__version__}")
        return 0
    if argv[1:2] == ["wait-ready"]:  # a unit's ExecStartPost=: no Django settings there, and it must start fast
        from sparkops.gate.waitready import main as wait_ready

        code = wait_ready(argv[2:])
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # now: a probe thread may sit in a stalled read, and teardown is time off the budget
    if argv[1:2] == ["stopped"]:  # a unit's ExecStopPost=: one datagram to the box's worker, never a failure
        from sparkops.controls.stopped import main as stopped

        os._exit(stopped(argv[2:]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")
    asks_help = argv[1:] in ([], ["--help"], ["-h"], ["help"])
    if (asks_help or _asks_help(argv[2:]) or argv[1] == "help") and install_missing(BASE_DIR):
        os.environ["SPARKOPS_GENERATE_SECRET_KEY"] = "0"  # help needs no key: none is written where no install is
    if asks_help:
        print(main_help())
        return 0
    command = argv[1]
    checked = _needs_install(command, argv[2:])
    if checked:  # before settings load: loading them writes a secret_key, opening SQLite makes its file
        problem = install_missing(BASE_DIR)
        if problem:
            print(f"sparkops {command}: {problem}", file=sys.stderr)
            return 1
    # Under `sparkops up` (the worker, the simulator): never outlive it by more than a few seconds.
    watch_parent()
    from django.core.management import execute_from_command_line
    from django.db import DatabaseError

    try:
        execute_from_command_line(["sparkops", *argv[1:]])
    except DatabaseError:
        problem = _unmigrated() if checked else None
        if problem is None:
            raise
        print(f"sparkops {command}: {problem}", file=sys.stderr)
        return 1
    return 0


# SparkOps's commands that need no install of their own: `up` makes one; the simulator needs no
# database; the worker, `launch` and `unit` run under units whose migrate step comes first (or on
# a box whose DATABASE_URL names the fleet's); `wait-ready` and `stopped` never load Django.
NEEDS_NO_INSTALL = frozenset({"up", "simulate", "worker", "launch", "unit", "wait-ready", "stopped"})


def _needs_install(command: str, rest: list[str]) -> bool:
    """Whether COMMAND (with its arguments REST) reads or writes an install's database: SparkOps's
    own commands but those above; --help of any needs none."""
    if command in NEEDS_NO_INSTALL or _asks_help(rest):
        return False
    spec = importlib.util.find_spec("dashboard.management.commands")
    folders = spec.submodule_search_locations if spec else None
    return any((Path(folder) / f"{command}.py").is_file() for folder in folders or ())


def _asks_help(rest: list[str]) -> bool:
    return "-h" in rest or "--help" in rest


def _unmigrated() -> str | None:
    """What to say when the database holds no SparkOps tables (a `no such table` traceback
    otherwise): None when it does, or when even that cannot be asked."""
    from django.db import DatabaseError, connection

    try:
        tables = connection.introspection.table_names()
    except DatabaseError:
        return None
    if "django_migrations" in tables:
        return None
    name = connection.settings_dict["NAME"]
    return (
        f"the database {name} holds no SparkOps tables: run `sparkops migrate` there first "
        "(`sparkops up` does), or point SPARKOPS_VAR_DIR or DATABASE_URL at the install you mean"
    )


def main_help() -> str:
    """`sparkops --help`: SparkOps's own commands first, each with the first line of its help,
    then Django's (whose own listing names every command of every app, without a word on any)."""
    import django
    from django.core.management import get_commands, load_command_class

    django.setup()
    ours: list[str] = []
    theirs: dict[str, list[str]] = {}
    for name, app in sorted(get_commands().items()):
        if app.startswith("dashboard"):
            help_text = load_command_class(app, name).help.strip().splitlines() or [""]
            ours.append(f"  {name:<11} {help_text[0]}")
        else:
            theirs.setdefault(app.rpartition(".")[2], []).append(name)
    lines = ["usage: sparkops COMMAND [options]   (sparkops COMMAND --help for one command's options)", ""]
    lines += ["SparkOps commands:", *ours, "", "  --version   the installed version", ""]
    lines.append("Django's commands and its add-ons' (sparkops help COMMAND describes one):")
    lines += [f"  [{app}] " + ", ".join(names) for app, names in sorted(theirs.items())]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
