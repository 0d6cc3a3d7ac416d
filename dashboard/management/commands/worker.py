"""`sparkops worker [--host NAME]`: this box's watcher. Its resident poller reads the box's
sources (PSI, NVML, systemd, journal, processes) and polls the box's engines on the clock
(sparkops/poller/resident.py); its Celery side consumes the shared `celery` queue
(alert deliveries, benchmarks, store upkeep) and this box's own `host.<NAME>` queue.

The threads pool: polls wait on sockets and subprocesses, not the CPU, and one process
with a few threads stays near 60 MB instead of a prefork child per slot.

Its Redis connections are named `sparkops-worker-<host>-<pid>`: an idle worker's BRPOP waits up to the
broker's polling_interval (10 s) and a warm shutdown waits for it to return, so on shutdown
the worker asks Redis to end its own blocked read at once (CLIENT UNBLOCK)."""

import logging
import os
import socket
from argparse import ArgumentParser
from typing import Any

import redis
from celery import signals
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from dashboard.models import Host
from sparkops.celery import app

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Run the Celery worker of this box (queues: celery + host.<NAME>)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--host", default=None, help="This box's host name (default SPARKOPS_HOST_NAME).")
        parser.add_argument("--concurrency", type=int, default=4, help="Worker threads (default 4).")
        parser.add_argument("--loglevel", default="INFO")
        parser.add_argument("--queues", default="", help="Extra queues, comma-separated.")
        parser.add_argument(
            "--no-poller",
            action="store_true",
            help="Run tasks only; do not poll this box and its engines (another worker does).",
        )

    def handle(self, *args: Any, **opts: Any) -> None:

        if not opts["no_poller"]:
            claim_runtime()
        name = opts["host"] or settings.SPARKOPS_HOST_NAME
        host, _ = Host.objects.get_or_create(name=name)
        # What the web shows on this box's down cards: a Restart button only where this worker runs it.
        Host.objects.filter(pk=host.pk).update(unit_actions=settings.SPARKOPS_UNIT_ACTIONS)
        queues = ["celery", host.queue, *[q for q in opts["queues"].split(",") if q]]
        argv = [
            "worker",
            "--pool=threads",
            f"--concurrency={max(1, opts['concurrency'])}",
            f"--loglevel={opts['loglevel']}",
            f"--queues={','.join(queues)}",
            f"--hostname={name}@%h",
            # gossip/mingle/heartbeat are cluster chatter nothing here uses; they cost CPU every second
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        # unique across a fleet's boxes (and containers, where every worker is pid 1); no spaces in a Redis client name
        client_name = "sparkops-worker-" + f"{socket.gethostname()}-{os.getpid()}".replace(" ", "_")
        app.conf.broker_transport_options = {**app.conf.broker_transport_options, "client_name": client_name}
        signals.worker_shutting_down.connect(_unblock_reads(app.conf.broker_url, client_name), weak=False)
        if not opts["no_poller"]:
            from sparkops.poller.entrypoints import PollerStep

            app.conf.sparkops_poller_host = name
            app.steps["worker"].add(PollerStep)
        self.stdout.write(
            f"worker for host {name}: queues {', '.join(queues)}"
            + ("" if opts["no_poller"] else "; polling this box and its engines")
        )
        app.worker_main(argv)


def claim_runtime() -> None:
    """Take this install's runtime directory (its units' stop socket, its launches' lock) before
    anything starts: refused when another install's live worker holds it (issue 47: this worker
    only logged that it could not listen, and fixes applied then sent this install's units' stops
    to the other one); recorded in the var dir for every command of this install."""
    from sparkops.controls.runtime import RuntimeHeld, runtime_claim

    try:
        runtime_claim(
            runtime_dir=settings.SPARKOPS_RUNTIME_DIR,
            stop_socket=settings.SPARKOPS_STOP_SOCKET,
            var_dir=settings.VAR_DIR,
        )
    except RuntimeHeld as exc:
        raise CommandError(f"refused: {exc}") from None
    except OSError as exc:  # not writable here: the stop listener says so too; polling goes on
        log.warning("runtime directory %s not claimed: %s", settings.SPARKOPS_RUNTIME_DIR, exc)


def _unblock_reads(broker_url, client_name):
    """A worker_shutting_down receiver: end the blocked BRPOP of the connections named
    CLIENT_NAME, so the warm shutdown does not wait out the polling interval. Redis answers
    an unblocked BRPOP as if it had timed out; the worker then stops reading."""

    def unblock(**_: Any) -> None:
        if not broker_url.startswith(("redis://", "rediss://", "unix://")):
            return
        try:
            with redis.Redis.from_url(broker_url, socket_timeout=1.0, socket_connect_timeout=1.0) as client:
                for entry in client.client_list():
                    if entry.get("name") == client_name and "b" in entry.get("flags", ""):
                        client.client_unblock(entry["id"])
        except redis.RedisError as exc:  # the shutdown still ends, a polling interval later
            log.warning("worker shutdown: could not unblock its broker read: %s", exc)

    return unblock
