"""Real receivers on 127.0.0.1: an HTTP webhook server and an SMTP server (aiosmtpd)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aiosmtpd.controller import Controller

from sparkops.ports import free_port


class WebhookReceiver:
    """Records every POST; `script` is a list of statuses to answer in turn (then 200)."""

    def __init__(self):
        self.requests = []
        self.script = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    status = receiver.script.pop(0) if receiver.script else 200
                    receiver.requests.append(
                        {"headers": dict(self.headers), "body": body, "status": status, "at": time.time()}
                    )
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"ok": true}' if status < 300 else b'{"error": "nope"}')

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def accepted(self):
        """Successful deliveries as (idempotency key, parsed body)."""
        return [
            (r["headers"].get("Idempotency-Key"), json.loads(r["body"])) for r in self.requests if r["status"] < 300
        ]

    def wait_for(self, n, timeout=10.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if len(self.accepted()) >= n:
                return True
            time.sleep(0.02)
        return False

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class MailSink:
    """Records every message; `rcpt_replies` is a list of replies to RCPT TO in turn (then 250 OK)."""

    def __init__(self):
        self.messages = []
        self.rcpt_replies = []

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if self.rcpt_replies:
            return self.rcpt_replies.pop(0)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.messages.append({"from": envelope.mail_from, "to": envelope.rcpt_tos, "data": envelope.content})
        return "250 OK"


def start_smtp():
    sink = MailSink()
    controller = Controller(sink, hostname="127.0.0.1", port=free_port())
    controller.start()
    return controller, sink
