"""`manage.py simulate` (`sparkops simulate`): run simulated engines for demo mode and tests.

Thin wrapper: all behaviour lives in simulator.cli.
"""

from argparse import ArgumentParser, Namespace
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from simulator.cli import add_arguments, run_from_args


class Command(BaseCommand):
    help = "Run simulated LLM engines (vLLM, llama.cpp, SGLang, OpenAI-compatible) under a systemd-like supervisor."

    def add_arguments(self, parser: ArgumentParser) -> None:

        add_arguments(parser)

    def handle(self, *args: Any, **options: Any):

        ns = Namespace(
            engine=options["engine"],
            state_dir=options["state_dir"],
            control_port=options["control_port"],
            ports_file=options["ports_file"],
        )
        code = run_from_args(ns, out=lambda line: (self.stdout.write(line), self.stdout.flush()))
        if code:
            raise CommandError(f"simulator exited with status {code}", returncode=code)
