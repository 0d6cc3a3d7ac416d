import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from sparkops.alerts.models import AlertRuleOverride, Delivery, Silence
from sparkops.alerts.services import external_alert_fire

pytestmark = pytest.mark.django_db


def run(*args):
    out = StringIO()
    call_command("alerts", *args, stdout=out)
    return out.getvalue()


def test_list_json(fleet):
    external_alert_fire(
        rule="kernel_fault", severity="critical", host=fleet["host"], subject="spark-1", message="Xid 79"
    )
    rows = json.loads(run("list", "--json"))
    assert rows[0]["rule"] == "kernel_fault" and rows[0]["state"] == "firing"


def test_test_channel_and_unknown(fleet):
    run("test-channel", "ops-hook")
    assert Delivery.objects.get().transition == "test"
    with pytest.raises(CommandError, match="no channel named 'nope'"):
        run("test-channel", "nope")


def test_silence_and_rule(fleet):
    run("silence", "--engine", "vllm-main", "--hours", "2")
    assert Silence.objects.get().engine == fleet["vllm"]
    run("rule", "restart_loop", "--engine", "vllm-main", "--set", "count=5")
    assert AlertRuleOverride.objects.get().params == {"count": 5}
    with pytest.raises(CommandError, match="has no setting 'bogus'"):
        run("rule", "restart_loop", "--set", "bogus=1")
