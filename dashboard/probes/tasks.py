"""Thin Celery tasks: load by id, call a service. A scheduled probe waits (retries later) while an
engine of its box is inside its start; otherwise no retries: a failed probe is a result to keep."""

from celery import shared_task

from .models import ProbeProfile, ProbeRun

START_WAIT_S = 60
SCHEDULE_WAIT_MAX_S = 3600  # then the run is kept as refused, saying the box was still starting


@shared_task(name="probe.run_execute", ignore_result=True)
def probe_run_execute_task(run_id):
    from .services import probe_run_execute

    run = ProbeRun.objects.select_related("engine", "profile").filter(pk=run_id).first()
    if run is not None:
        probe_run_execute(run=run)


@shared_task(name="probe.profile_scheduled", bind=True, ignore_result=True, max_retries=None)
def probe_profile_scheduled(self, profile_id):
    """Beat (the profile's PeriodicTask) -> one scheduled run here and now, or later while the box starts."""
    from .schedule import box_starting, profile_run_scheduled

    profile = ProbeProfile.objects.select_related("engine__host").filter(pk=profile_id).first()
    if profile is None:
        return
    why = box_starting(profile.engine)
    if why and self.request.retries * START_WAIT_S < SCHEDULE_WAIT_MAX_S:
        raise self.retry(countdown=START_WAIT_S)
    profile_run_scheduled(profile=profile, waited_for=why)


@shared_task(name="probe.sweep_stale", ignore_result=True)
def probe_sweep_stale():
    from .schedule import probe_runs_sweep_stale

    probe_runs_sweep_stale()
