"""Thin Celery tasks: load by id, call a service. No retries: a failed probe is a result to keep, and a
scheduled probe that meets a starting box waits as a queued run row (see schedule.py), not a retry."""

from celery import shared_task

from .models import ProbeProfile, ProbeRun


@shared_task(name="probe.run_execute", ignore_result=True)
def probe_run_execute_task(run_id):
    from .services import probe_run_execute

    run = ProbeRun.objects.select_related("engine", "profile").filter(pk=run_id).first()
    if run is not None:
        probe_run_execute(run=run)


@shared_task(name="probe.profile_scheduled", ignore_result=True)
def probe_profile_scheduled(profile_id):
    """Beat (the profile's PeriodicTask) -> one scheduled run here and now, or a queued run that waits
    while the box starts (released by `probe.release_postponed`)."""
    from .schedule import profile_run_scheduled

    profile = ProbeProfile.objects.select_related("engine__host").filter(pk=profile_id).first()
    if profile is not None:
        profile_run_scheduled(profile=profile)


@shared_task(name="probe.release_postponed", ignore_result=True)
def probe_release_postponed():
    """Beat: release the scheduled probe runs that waited for their box's engines to start."""
    from .schedule import probe_runs_release_postponed

    probe_runs_release_postponed()


@shared_task(name="probe.sweep_stale", ignore_result=True)
def probe_sweep_stale():
    from .schedule import probe_runs_sweep_stale

    probe_runs_sweep_stale()
