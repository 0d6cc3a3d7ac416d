"""The `sparkops` console script: every subcommand is a Django management command."""

import os
import sys

from sparkops.lifeline import watch_parent


def main(argv=None):
    argv = list(sys.argv if argv is None else argv)
    if argv[1:] == ["--version"]:  # Django's own --version would print Django's
        from sparkops.version import __version__

        print(f"sparkops {__version__}")
        return 0
    if argv[1:2] == ["wait-ready"]:  # a unit's ExecStartPost=: no Django settings there, and it must start fast
        from dashboard.controls.waitready import main as wait_ready

        code = wait_ready(argv[2:])
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # now: a probe thread may sit in a stalled read, and teardown is time off the budget
    if argv[1:2] == ["stopped"]:  # a unit's ExecStopPost=: one datagram to the box's worker, never a failure
        from dashboard.controls.stopped import main as stopped

        os._exit(stopped(argv[2:]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")
    if argv[1:] in ([], ["--help"], ["-h"], ["help"]):
        print(main_help())
        return 0
    # Under `sparkops up` (the worker, the simulator): never outlive it by more than a few seconds.
    watch_parent()
    from django.core.management import execute_from_command_line

    execute_from_command_line(["sparkops", *argv[1:]])
    return 0


def main_help():
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
