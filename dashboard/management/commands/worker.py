"""`sparkops worker [--host NAME]`: a Celery worker for the shared `celery` queue and this
box's own `host.<NAME>` queue (PSI, NVML, systemd, journal and processes are read here).

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

    def handle(self, *args, **opts):
        from sparkops.celery import app

        name = opts["host"] or settings.SPARKOPS_HOST_NAME
        host, _ = Host.objects.get_or_create(name=name)
        queues = ["celery", host.queue, *[q for q in opts["queues"].split(",") if q]]
        argv = ["worker", "--pool=threads", f"--concurrency={max(1, opts['concurrency'])}",
                f"--loglevel={opts['loglevel']}", f"--queues={','.join(queues)}", f"--hostname={name}@%h",
                # gossip/mingle/heartbeat are cluster chatter nothing here uses; they cost CPU every second
                "--without-gossip", "--without-mingle", "--without-heartbeat"]
        self.stdout.write(f"worker for host {name}: queues {', '.join(queues)}")
        app.worker_main(argv)
