# The Celery app (sparkops/celery.py) is loaded by DashboardConfig.ready(), in every Django process,
# before any @shared_task is used; `celery -A sparkops` finds sparkops.celery by itself. Importing the
# package alone (the simulator's supervisor, `sparkops wait-ready` as an ExecStartPost= gate,
# `sparkops stopped`) no longer pays Celery's import, about 110 ms of a core a start.
