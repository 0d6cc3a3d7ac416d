"""Recorded payloads (zulip-style fixtures per source and version) and real loopback servers."""

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dashboard.http import Response

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def fixture_bytes(source, name):
    return (FIXTURES / source / name).read_bytes()


def fixture_response(source, name, status=200):
    return Response(status=status, headers={}, content=fixture_bytes(source, name), url=f"fixture:{name}")


class Routes(dict):
    """path -> (status, body bytes, headers) or a callable(handler) that answers itself."""


def reply(handler, route):
    """Answer HANDLER's request with ROUTE: a callable that answers it, or (status, body, headers); None: 404."""
    if callable(route):
        return route(handler)
    status, body, headers = route if route else (404, b"not found", {})
    handler.send_response(status)
    for key, value in {"Content-Length": str(len(body)), **headers}.items():
        handler.send_header(key, value)
    handler.end_headers()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        handler.wfile.write(body)
    return None


def serve(routes):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            return reply(self, routes.get(self.path.split("?")[0]))

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server


@pytest.fixture
def http_server():
    """Start loopback servers: `url = http_server({"/metrics": (200, b"...", {})})`."""
    servers = []

    def start(routes):
        server = serve(routes)  # the same dict: a test may change answers between polls
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
