"""The `sparkops` console script: every subcommand is a Django management command."""
import os
import sys


def main(argv=None):
    argv = list(sys.argv if argv is None else argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(["sparkops", *argv[1:]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
