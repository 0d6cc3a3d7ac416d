"""Thin Celery task: load by id, advance the experiment. No retries (a failed repetition is a result)."""

from celery import shared_task

from .models import Experiment


@shared_task(name="experiments.advance", ignore_result=True)
def experiment_advance_task(experiment_id: int) -> None:
    from .runner import experiment_advance

    experiment = Experiment.objects.select_related("engine_a__host", "engine_b").filter(pk=experiment_id).first()
    if experiment is not None:
        experiment_advance(experiment=experiment)


@shared_task(name="experiments.sweep_stale", ignore_result=True)
def experiments_sweep_stale_task() -> None:
    from .runner import experiments_sweep_stale

    experiments_sweep_stale()
