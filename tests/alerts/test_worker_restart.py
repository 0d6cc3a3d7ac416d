"""A real Celery worker killed mid-retry: the next worker still delivers, exactly once."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection

from sparkops.alerts import outbox
from sparkops.alerts.models import Delivery, NotificationChannel
from sparkops.alerts.services import external_alert_fire
from tests.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]


def start_worker(tmp_path, name):
    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "SPARKOPS_ALERT_RETRY_BASE_S": "1.5",
        "DJANGO_SETTINGS_MODULE": "sparkops.settings",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{connection.settings_dict['NAME']}",
    }
    log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 (the child's log: open while it runs)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "sparkops",
            "worker",
            "--pool=solo",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
            "-n",
            f"{name}@h3",
            "-l",
            "INFO",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def swept_and_sent():
    outbox.sweep()  # beat's sweep, run by hand: re-queues the row once its backoff is over
    return Delivery.objects.filter(status="sent").exists()


@pytest.mark.skipif(
    not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
    reason="a worker subprocess needs a database server",
)
def test_worker_killed_mid_retry_delivers_exactly_once(fleet, receiver, tmp_path):
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    NotificationChannel.objects.exclude(kind="webhook").delete()
    NotificationChannel.objects.filter(kind="webhook").update(config={"url": receiver.url, "format": "sparkops"})
    receiver.script = [500]
    first = start_worker(tmp_path, "first")
    try:
        external_alert_fire(
            rule="engine_down", severity="critical", engine=fleet["vllm"], subject="vllm-main", message="down"
        )
        assert wait_for(lambda: Delivery.objects.filter(attempts=1, status="pending").exists(), 30), (
            tmp_path / "first.log"
        ).read_text()
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert len(receiver.requests) == 1 and receiver.requests[0]["status"] == 500
    second = start_worker(tmp_path, "second")
    try:
        assert wait_for(swept_and_sent, 40), (tmp_path / "second.log").read_text()
        time.sleep(1.0)
        outbox.sweep()
        time.sleep(1.0)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=20)
    keys = [key for key, _ in receiver.accepted()]
    assert len(keys) == 1 == len(set(keys))
    assert Delivery.objects.get().attempts == 2
