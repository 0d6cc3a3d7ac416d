"""The watcher's heartbeat against a real Healthchecks-style receiver on 127.0.0.1: the leading
worker's duty pings the URL while /healthz would say 200 and `<url>/fail` (with the problems)
when it would say 503; a hung receiver never holds up the poller."""

import json
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from dashboard.heartbeat import Heartbeat, fail_url
from dashboard.models import Engine, Host
from dashboard.schedule import resident_duties
from sparkops.poller.resident import ResidentPoller

pytestmark = pytest.mark.django_db(transaction=True)


HOLD_S = 30.0  # a held answer's longest wait: far past the heartbeat's own timeout


class Checker:
    """Records (method, path, body) of every ping once it answers it; while `hold` is set to an
    Event each answer waits for it (at most HOLD_S), as a hung receiver would."""

    def __init__(self):
        self.pings, self.hold = [], None
        checker = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if checker.hold is not None:
                    checker.hold.wait(HOLD_S)
                checker.pings.append((self.command, self.path, body))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/ping/5f1b0c2e"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, n, timeout=10.0):
        deadline = time.monotonic() + timeout
        while len(self.pings) < n and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.pings[:n]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def checker(settings):
    c = Checker()
    settings.SPARKOPS_HEARTBEAT_URL = c.url
    settings.SPARKOPS_HEARTBEAT_INTERVAL_S = 30.0
    yield c
    c.close()


def healthy_box():
    host = Host.objects.create(name="spark-1", last_report_at=timezone.now())
    Engine.objects.create(
        name="vllm-main", kind="vllm", url="http://127.0.0.1:9", host=host, status="up", last_poll_at=timezone.now()
    )
    return host


def test_the_leading_worker_pings_while_healthy_and_fails_when_not(checker, settings):
    settings.SPARKOPS_HOST_NAME = "spark-1"
    duties = resident_duties()
    assert duties["heartbeat"][0] == 30.0
    poller = ResidentPoller("spark-1")  # the schedule's duties, heartbeat included
    Host.objects.create(name="spark-1")
    poller.metrics_tick()  # this box reports, so /healthz is ok, and it leads
    assert poller.leader
    poller.run_duty("heartbeat")
    (ping,) = checker.wait(1)
    assert ping[:2] == ("GET", "/ping/5f1b0c2e")

    Host.objects.update(last_report_at=timezone.now() - timedelta(minutes=10))  # its worker went silent
    Engine.objects.update(last_poll_at=timezone.now() - timedelta(minutes=10))
    poller.duties["heartbeat"][1].join(5)
    poller.run_duty("heartbeat")
    _, (method, path, _) = checker.wait(2)
    assert (method, path) == ("GET", "/ping/5f1b0c2e/fail")
    assert poller.cycles["heartbeat"] == 2


def test_post_carries_the_problems(checker, settings):
    host = healthy_box()
    beat = Heartbeat(checker.url, method="POST")
    assert beat() == checker.url
    beat.join(5)
    Host.objects.filter(pk=host.pk).update(last_report_at=timezone.now() - timedelta(minutes=10))
    assert beat() == checker.url + "/fail"
    beat.join(5)
    (m1, p1, b1), (m2, p2, b2) = checker.wait(2)
    assert (m1, p1, json.loads(b1)["status"]) == ("POST", "/ping/5f1b0c2e", "ok")
    body = json.loads(b2)
    assert (m2, p2, body["status"]) == ("POST", "/ping/5f1b0c2e/fail", "unhealthy")
    assert any("host spark-1: its worker has not reported" in p for p in body["problems"])


def test_a_hung_checker_never_holds_up_the_poller(checker):
    """The receiver holds its answer until the test lets it go: both calls return while it holds
    (a call that waited for the answer would find it answered, or the second not skipped)."""
    healthy_box()
    checker.hold = threading.Event()
    beat = Heartbeat(checker.url)
    try:
        assert beat() == checker.url
        assert beat() is None  # the first is still waiting: this one is skipped, not queued
        assert checker.pings == []  # returned before the receiver answered
    finally:
        checker.hold.set()
    beat.join(5)
    assert len(checker.wait(1)) == 1 and beat.last == (checker.url, 200)


def test_no_url_no_duty_and_fail_urls(settings):
    settings.SPARKOPS_HEARTBEAT_URL = ""
    assert "heartbeat" not in resident_duties()
    assert fail_url("https://hc-ping.com/abc") == "https://hc-ping.com/abc/fail"
    assert fail_url("https://hc-ping.com/abc/") == "https://hc-ping.com/abc/fail"
    assert fail_url("https://kuma.example/api/push/T?status=up") == "https://kuma.example/api/push/T/fail?status=up"
    settings.SPARKOPS_HEARTBEAT_URL = "https://kuma.example/api/push/T?status=up&msg=OK"
    settings.SPARKOPS_HEARTBEAT_FAIL_URL = "https://kuma.example/api/push/T?status=down&msg=unhealthy"
    beat = resident_duties()["heartbeat"][1]
    assert beat.fail == "https://kuma.example/api/push/T?status=down&msg=unhealthy"
