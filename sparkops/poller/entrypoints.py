"""How a resident poller is run: beside a Celery worker (`PollerStep`, the worker's bootstep:
`sparkops worker`) or for one tick of its own (`poll_once`: `sparkops poll --once`)."""

from celery import bootsteps
from django.conf import settings
from django.utils import timezone

from dashboard.models import Engine
from sparkops.collectors import runner
from sparkops.poller.lease import Adoptions, PollerLease, UpkeepLease
from sparkops.poller.resident import ResidentPoller


def poll_once(*, host_name=None, engines=None):
    """`sparkops poll --once`: one tick of a poller of its own over ENGINES (default every
    watched engine), then a flush; the `poll --json` object."""
    poller = ResidentPoller(host_name or settings.SPARKOPS_HOST_NAME, duties={}, flush_interval=0)
    if engines is None:
        engines = Engine.objects.select_related("host").filter(retired_at__isnull=True).order_by("pk")
    try:
        result = poller.metrics_tick(engines=list(engines))
        poller.flush()
        poller._guard("launch config", poller.launch_tick)
    finally:
        runner.close()
    host = result.host
    return {
        "time": timezone.now().isoformat(),
        "engines": [reading for _, reading in result.engines],
        "host": host["host"],
        "gpus": host["gpus"],
        "gpu_state": host["gpu_state"],
        "processes": host["processes"],
        "kernel_lines": host["kernel_lines"],
    }


class PollerStep(bootsteps.StartStopStep):
    """Runs a ResidentPoller for `app.conf.sparkops_poller_host` alongside the worker: it
    starts when the worker starts and stops on the worker's warm shutdown."""

    label = "SparkOps resident poller"

    def __init__(self, worker, **kwargs):
        super().__init__(worker, **kwargs)
        self.poller = None

    def start(self, worker):
        host_name = worker.app.conf.sparkops_poller_host
        self.poller = ResidentPoller(
            host_name, lease=PollerLease(host_name), adoptions=Adoptions(host_name), upkeep=UpkeepLease(host_name)
        ).start()

    def stop(self, worker):  # noqa: ARG002 (Celery's bootstep signature)
        if self.poller is not None:
            self.poller.stop()
            self.poller = None

    shutdown = stop
