"""`sparkops worker [--host NAME]`: this box's watcher. Its resident poller reads the box's
sources (PSI, NVML, systemd, journal, processes) and polls the box's engines on the clock
(dashboard/services/resident.py); its Celery side consumes the shared `celery` queue
(alert deliveries, benchmarks, store upkeep) and this box's own `host.<NAME>` queue.

The threads pool: polls wait on sockets and subprocesses, not the CPU, and one process
with a few threads stays near 60 MB instead of a prefork child per slot."""
from django.conf import settings
from django.core.management.base import BaseCommand

from dashboard.models import Host


class Command(BaseCommand):
    help = "Run the Celery worker of this box (queues: celery + host.<NAME>)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=None, help="This box's host name (default SPARKOPS_HOST_NAME).")
        parser.add_argument("--concurrency", type=int, default=4, help="Worker threads (default 4).")
        parser.add_argument("--loglevel", default="INFO")
        parser.add_argument("--queues", default="", help="Extra queues, comma-separated.")
        parser.add_argument("--no-poller", action="store_true",
                            help="Run tasks only; do not poll this box and its engines (another worker does).")

    def handle(self, *args, **opts):
        from sparkops.celery import app

        name = opts["host"] or settings.SPARKOPS_HOST_NAME
        host, _ = Host.objects.get_or_create(name=name)
        queues = ["celery", host.queue, *[q for q in opts["queues"].split(",") if q]]
        argv = ["worker", "--pool=threads", f"--concurrency={max(1, opts['concurrency'])}",
                f"--loglevel={opts['loglevel']}", f"--queues={','.join(queues)}", f"--hostname={name}@%h",
                # gossip/mingle/heartbeat are cluster chatter nothing here uses; they cost CPU every second
                "--without-gossip", "--without-mingle", "--without-heartbeat"]
        if not opts["no_poller"]:
            from dashboard.services.resident import PollerStep

            app.conf.sparkops_poller_host = name
            app.steps["worker"].add(PollerStep)
        self.stdout.write(f"worker for host {name}: queues {', '.join(queues)}"
                          + ("" if opts["no_poller"] else "; polling this box and its engines"))
        app.worker_main(argv)
