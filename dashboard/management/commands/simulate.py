"""`manage.py simulate` (`sparkops simulate`): run simulated engines for demo mode and tests.

Thin wrapper: all behaviour lives in dashboard.simulator.cli.
"""

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Run simulated LLM engines (vLLM, llama.cpp, SGLang, OpenAI-compatible) under a systemd-like supervisor."

    def add_arguments(self, parser):
        from dashboard.simulator.cli import add_arguments

        add_arguments(parser)

    def handle(self, *args, **options):
        from argparse import Namespace

        from dashboard.simulator.cli import run_from_args

        ns = Namespace(
            engine=options["engine"],
            state_dir=options["state_dir"],
            control_port=options["control_port"],
            ports_file=options["ports_file"],
        )
        code = run_from_args(ns, out=lambda line: (self.stdout.write(line), self.stdout.flush()))
        if code:
            raise CommandError(f"simulator exited with status {code}", returncode=code)
