"""Signal receivers that connect the collectors to alert evaluation.

engine_liveness is evaluated right here, in the probing worker, so a confirmed death is an
outbox row at once and a webhook task the moment the transaction commits (well under 2 s)."""
from django.dispatch import receiver

from dashboard.signals import engine_liveness, engine_polled, host_polled

from .evaluate import evaluate


@receiver(engine_liveness, dispatch_uid="alerts.engine_liveness")
def on_engine_liveness(sender, *, engine, up, reason="", checked_at=None, rechecked=False, **kwargs):
    evaluate("engine_liveness", engine=engine, up=up, reason=reason, rechecked=rechecked)


@receiver(engine_polled, dispatch_uid="alerts.engine_polled")
def on_engine_polled(sender, *, engine, reading, **kwargs):
    evaluate("engine_polled", engine=engine, reading=reading or {})


@receiver(host_polled, dispatch_uid="alerts.host_polled")
def on_host_polled(sender, *, host, reading, **kwargs):
    evaluate("host_polled", host=host, reading=reading or {})
