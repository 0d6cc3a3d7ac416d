"""A worker's connection pool is its own size (issue 48 item 4): 50 boxes' workers each holding
a pool sized for the web outgrew PostgreSQL's 100 connections."""

import json
import os
import subprocess
import sys

import pytest

PRINT_POOL = (
    "import sys; sys.argv = ['sparkops', *sys.argv[1:]]; import django; django.setup(); "
    "from django.conf import settings; import json; "
    "print(json.dumps(settings.DATABASES['default']['OPTIONS']['pool']))"
)


def pool_of(*argv, **env):
    done = subprocess.run(
        [sys.executable, "-c", PRINT_POOL, *argv],
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "sparkops.settings",
            "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",  # settings only: nothing connects
            **env,
        },
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("argv", "env", "max_size"),
    [
        (("worker", "--host", "box01"), {}, 2),
        (("worker",), {"SPARKOPS_DB_POOL_MAX": "10"}, 2),  # the web's setting is not the worker's
        (("worker",), {"SPARKOPS_WORKER_DB_POOL_MAX": "1"}, 1),
        (("web",), {}, 10),
        (("web",), {"SPARKOPS_WORKER_DB_POOL_MAX": "1"}, 10),
    ],
)
def test_a_worker_has_a_pool_of_its_own_size(argv, env, max_size):
    pool = pool_of(*argv, **{"SPARKOPS_DB_POOL_MAX": "", **env})
    assert pool["max_size"] == max_size and pool["min_size"] <= max_size


PRINT_CURSORS = (
    "import django; django.setup(); from django.conf import settings; "
    "print(settings.DATABASES['default']['DISABLE_SERVER_SIDE_CURSORS'])"
)


@pytest.mark.parametrize(("flag", "disabled"), [("1", "True"), ("", "False")])
def test_behind_pgbouncer_no_server_side_cursor_outlives_a_transaction(flag, disabled):
    """Transaction pooling hands each transaction any server connection: a cursor declared
    WITH HOLD outside one (QuerySet.iterator()) would be looked for on another."""
    done = subprocess.run(
        [sys.executable, "-c", PRINT_CURSORS],
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "sparkops.settings",
            "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",
            "SPARKOPS_DB_PGBOUNCER": flag,
        },
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip().splitlines()[-1] == disabled
