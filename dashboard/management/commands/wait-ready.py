"""`python manage.py wait-ready …`: the same gate as `sparkops wait-ready` (sparkops/gate/waitready.py),
which `sparkops` runs before Django is set up; here for the CLI reference's promise that every command
also works through manage.py."""

import sys

from django.core.management.base import BaseCommand

from sparkops.gate.waitready import main


class Command(BaseCommand):
    help = "The readiness gate for a unit's ExecStartPost= (see `sparkops wait-ready --help`)."

    def run_from_argv(self, argv) -> None:
        sys.exit(main(argv[2:]))  # its own parser and exit statuses (0 ready, 1 failed, 2 refused)
