"""Thin Celery tasks: load by id, call a service. No retries: a benchmark that failed
is a result to keep, and re-running it would measure a different moment. The tasks every measured
kind has (run_execute, profile_scheduled, release_postponed, sweep_stale) are the core's, made for
benchmarks under their "bench." names."""

from celery import shared_task

from .kind import BENCH
from .models import PairRun, Run, Sweep

bench_run_execute = BENCH.tasks.run_execute
bench_profile_scheduled = BENCH.tasks.profile_scheduled
bench_release_postponed = BENCH.tasks.release_postponed
bench_sweep_stale = BENCH.tasks.sweep_stale


@shared_task(name="bench.pair_execute", ignore_result=True)
def bench_pair_execute(pair_id):
    from .pair import pair_execute

    pair = PairRun.objects.filter(pk=pair_id).first()
    if pair is not None:
        pair_execute(pair=pair)


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
