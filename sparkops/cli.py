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
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")
    # Under `sparkops up` (the worker, the simulator): never outlive it by more than a few seconds.
    watch_parent()
    from django.core.management import execute_from_command_line

    execute_from_command_line(["sparkops", *argv[1:]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
