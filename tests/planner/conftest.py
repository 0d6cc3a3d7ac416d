import io
import json

import pytest
from django.core.management import call_command

from dashboard.models import Engine, Host

from .appendix import add_args


def cli(*args):
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def plan_json(*args):
    return json.loads(cli("plan", *args, "--json"))


def feed(rows):
    for row in rows:
        cli("ledger", *add_args(row))


@pytest.fixture
def spark(db):
    """The box of the field report with its two watched engines (vllm-nemotron :8012, vllm-q38 :8011)."""
    from django.conf import settings

    host = Host.objects.create(name=settings.SPARKOPS_HOST_NAME)
    for name, port in (("nemotron", 8012), ("q38", 8011)):
        Engine.objects.create(
            name=name, kind="vllm", url=f"http://127.0.0.1:{port}", host=host, unit=f"vllm-{name}.service"
        )
    return host
