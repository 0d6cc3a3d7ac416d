"""The start_limit_hit page's own message gives the command that brings the unit back, as it would
be pasted (issue 47 item 6: it said "runs `systemctl reset-failed` and starts it", no `--user`, no
unit): with `--user` and the unit's name for a user unit, without `--user` for a system one, for
the two ways systemd reports it (Result=start-limit-hit, and a crash loop that keeps the last
run's Result while its journal says "Start request repeated too quickly")."""

import pytest

from sparkops.alerts.evaluate import evaluate
from sparkops.alerts.models import AlertEvent
from sparkops.collectors.unitnow import UnitNow

pytestmark = pytest.mark.django_db

LIMIT_HIT = {
    "ActiveState": "failed",
    "SubState": "failed",
    "Result": "start-limit-hit",
    "ExecMainStatus": "1",
    "ExecMainCode": "1",
    "MainPID": "0",
    "NRestarts": "3",
    "Restart": "always",
}
CRASH_LOOP = {**LIMIT_HIT, "Result": "exit-code"}


def page(engine, unit_now):
    evaluate("engine_liveness", engine=engine, up=False, reason="connection refused", rechecked=True, unit_now=unit_now)
    event = AlertEvent.objects.get(rule="engine_down", subject=engine.name, state__in=AlertEvent.OPEN_STATES)
    assert event.cause == "start_limit_hit", event.message
    return event.message


@pytest.mark.parametrize(
    "unit_now",
    [
        UnitNow(LIMIT_HIT),
        UnitNow(CRASH_LOOP, start_limit_line="vllm-main.service: Start request repeated too quickly."),
    ],
    ids=["result-start-limit-hit", "crash-loop-journal-line"],
)
def test_the_start_limit_page_gives_the_pasteable_command_for_a_user_and_a_system_unit(fleet, settings, unit_now):
    settings.SPARKOPS_HOST_NAME = fleet["host"].name  # the units are on this box: read with the finding
    user, system = fleet["vllm"], fleet["llama"]
    user.unit_scope, system.unit_scope = "user", "system"
    user.save()
    system.save()
    mine = page(user, unit_now)
    assert "`systemctl --user reset-failed vllm-main.service && systemctl --user start vllm-main.service`" in mine, mine
    theirs = page(system, unit_now)
    assert "`systemctl reset-failed llama-side.service && systemctl start llama-side.service`" in theirs, theirs
    assert "--user" not in theirs and "UNIT" not in mine + theirs, (mine, theirs)
