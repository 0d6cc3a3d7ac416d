"""Thin Celery tasks: load by id, call a service. No retries: a benchmark that failed
is a result to keep, and re-running it would measure a different moment."""

from celery import shared_task

from .models import PairRun, Profile, Run, Sweep


@shared_task(name="bench.run_execute", ignore_result=True)
def bench_run_execute(run_id):
    from .services import run_execute

    run = Run.objects.select_related("engine", "profile").filter(pk=run_id).first()
    if run is not None:
        run_execute(run=run)


@shared_task(name="bench.profile_scheduled", ignore_result=True)
def bench_profile_scheduled(profile_id):
    """Beat (django-celery-beat PeriodicTask of the profile) → one scheduled run, here and now."""
    from .schedule import profile_run_scheduled

    profile = Profile.objects.select_related("engine").filter(pk=profile_id).first()
    if profile is not None:
        profile_run_scheduled(profile=profile)


@shared_task(name="bench.pair_execute", ignore_result=True)
def bench_pair_execute(pair_id):
    from .pair import pair_execute

    pair = PairRun.objects.filter(pk=pair_id).first()
    if pair is not None:
        pair_execute(pair=pair)


@shared_task(name="bench.sweep_stale", ignore_result=True)
def bench_sweep_stale():
    from .schedule import runs_sweep_stale
    from .sweep import sweeps_fail_stale

    runs_sweep_stale()
    sweeps_fail_stale()


@shared_task(name="bench.release_postponed", ignore_result=True)
def bench_release_postponed():
    """Beat: release the scheduled runs that waited for their box's engines to start."""
    from .schedule import runs_release_postponed

    runs_release_postponed()


@shared_task(name="bench.sweep_execute", ignore_result=True)
def bench_sweep_execute(sweep_id):
    from .sweep import sweep_execute

    sweep = Sweep.objects.select_related("engine").filter(pk=sweep_id).first()
    if sweep is not None:
        sweep_execute(sweep=sweep)


@shared_task(name="bench.rate_execute", ignore_result=True)
def bench_rate_execute(run_id):
    from .rate import rate_execute

    run = Run.objects.select_related("engine").filter(pk=run_id).first()
    if run is not None:
        rate_execute(run=run)
