"""Signal receivers that connect the collectors to alert evaluation.

engine_liveness is evaluated right here, in the probing worker, so a confirmed death is an
outbox row at once and a webhook task the moment the transaction commits (well under 2 s)."""
import time

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from dashboard.signals import engine_liveness, engines_polled, host_polled

from .evaluate import evaluate, evaluate_many, forget_config
from .models import AlertRule, AlertRuleOverride


# A probe that finds an engine up, as this process last evaluated it, changes nothing: skip
# the rule queries (one probe per engine per second is most of the watcher's work). The
# first "up" after a "down" is always evaluated, whoever moved Engine.status (a metrics poll
# may see the recovery before the probe does, so `changed` alone would miss it). Still
# evaluate a steady "up" now and then, so nothing left open by a lost evaluation outlives a
# restart for long.
STEADY_UP_EVERY_S = 30.0
_last_steady_eval = {}
_last_up = {}  # engine pk -> the liveness last evaluated in this process


def _worth_evaluating(engine, up, changed):
    now = time.monotonic()
    if not up or changed or _last_up.get(engine.pk) is not True or now - _last_steady_eval.get(engine.pk, float("-inf")) >= STEADY_UP_EVERY_S:
        _last_steady_eval[engine.pk] = now
        return True
    return False


@receiver(engine_liveness, dispatch_uid="alerts.engine_liveness")
def on_engine_liveness(sender, *, engine, up, reason="", checked_at=None, rechecked=False, changed=True, **kwargs):
    if _worth_evaluating(engine, up, changed):
        evaluate("engine_liveness", engine=engine, up=up, reason=reason, rechecked=rechecked)
    _last_up[engine.pk] = up  # only once evaluated: a failed evaluation of a recovery is retried next probe


@receiver(engines_polled, dispatch_uid="alerts.engines_polled")
def on_engines_polled(sender, *, polled, **kwargs):
    # One metrics cycle, all its engines in one batch: the same few queries for 1 engine as for 150.
    # The rules keep their trigger's name, "engine_polled". Only the engines' poller evaluates
    # them, tick after tick: it remembers the rule rows and memories between ticks.
    evaluate_many("engine_polled", [{"engine": engine, "reading": reading or {}} for engine, reading in polled],
                  remember=True)


@receiver(host_polled, dispatch_uid="alerts.host_polled")
def on_host_polled(sender, *, host, reading, **kwargs):
    evaluate("host_polled", host=host, reading=reading or {}, remember=True)


@receiver([post_save, post_delete], sender=AlertRule, dispatch_uid="alerts.rule_saved")
@receiver([post_save, post_delete], sender=AlertRuleOverride, dispatch_uid="alerts.override_saved")
def on_rule_saved(sender, **kwargs):
    forget_config()  # this process applies an edit at once; the others within CONFIG_TTL_S
