"""Issue 30 §7, the CLI items: lists that say they are empty, a reading's age and staleness in
`engine list`, and `sparkops --help` that leads with SparkOps's own commands."""

import json
import os
import subprocess
import sys
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from dashboard.clock import db_now
from dashboard.models import Engine, Host
from sparkops import cli


def run(*args):
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_empty_lists_say_so_and_json_is_an_empty_array():
    assert run("alerts", "list").strip() == "no open alerts"
    assert run("alerts", "list", "--state", "", "--engine", "vllm-main").strip() == "no alerts with engine vllm-main"
    assert run("channel", "list").startswith("no notification channels")
    assert run("engine", "list").startswith("no engines")
    for args in (("alerts", "list"), ("channel", "list"), ("engine", "list")):
        assert json.loads(run(*args, "--json")) == [], args


@pytest.mark.django_db
def test_engine_list_shows_the_readings_age_and_stale_when_no_worker_polls(fleet):
    now = db_now()
    vllm, llama = fleet["vllm"], fleet["llama"]
    Engine.objects.filter(pk=vllm.pk).update(last_poll_at=now - timedelta(seconds=1))
    # The stack stopped an hour ago: the llama engine's last reading said "up".
    Engine.objects.filter(pk=llama.pk).update(status="up", last_poll_at=now - timedelta(hours=1, seconds=5))
    Engine.objects.create(name="never-read", kind="openai", url="http://127.0.0.1:18003", host=Host.objects.get())
    rows = {e["name"]: e for e in json.loads(run("engine", "list", "--json"))}
    assert rows["vllm-main"]["stale"] is False and 1 <= rows["vllm-main"]["reading_age_s"] < 60
    assert rows["llama-side"]["stale"] is True and rows["llama-side"]["reading_age_s"] >= 3605
    assert rows["llama-side"]["status"] == "up"  # the JSON keeps the last status; `stale` qualifies it
    assert rows["never-read"]["reading_age_s"] is None and rows["never-read"]["stale"] is False
    lines = {line.split()[0]: line for line in run("engine", "list").splitlines()}
    assert "STATUS" in lines["NAME"] and "READING" in lines["NAME"]
    assert " up " in lines["vllm-main"] and "stale" not in lines["vllm-main"] and " s ago" in lines["vllm-main"]
    assert "stale (up)" in lines["llama-side"] and "1 h ago" in lines["llama-side"]
    assert "never read" in lines["never-read"]


@pytest.mark.django_db
def test_staleness_follows_the_engines_own_poll_interval(fleet):
    """Three intervals plus the store lag: 40 s is fresh for an engine polled every 30 s, stale at 2 s."""
    now = db_now()
    Engine.objects.filter(pk=fleet["vllm"].pk).update(last_poll_at=now - timedelta(seconds=40), poll_interval_s=30)
    Engine.objects.filter(pk=fleet["llama"].pk).update(last_poll_at=now - timedelta(seconds=40))
    rows = {e["name"]: e for e in json.loads(run("engine", "list", "--json"))}
    assert (rows["vllm-main"]["stale"], rows["llama-side"]["stale"]) == (False, True)


@pytest.fixture(autouse=True)
def _environ_kept():
    """`cli.main` sets os.environ as the process of its own it runs in may (help where no install is
    says SPARKOPS_GENERATE_SECRET_KEY=0). Here it runs in the test worker, whose later tests start
    stacks and commands with this environment: left set, their processes had no secret key and made
    no var dir (CI's failures of tests/test_one_install.py after this module on the same worker)."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def _help_text(capsys, *argv):
    assert cli.main(["sparkops", *argv]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["help"], []])
def test_help_lists_sparkops_commands_first_each_with_one_line(capsys, argv):
    text = _help_text(capsys, *argv)
    ours = text.index("SparkOps commands:")
    django = text.index("Django's commands")
    assert ours < django < text.index("migrate") and text.index("collectstatic") > django
    for name in ("up", "engine", "channel", "alerts", "worker", "simulate", "audit", "plan"):
        line = next(line for line in text[ours:django].splitlines() if line.split()[:1] == [name])
        assert len(line.split()) > 3, line  # a description follows the name
    assert "Add, list or remove the engines SparkOps watches." in text


def test_help_of_one_command_is_still_djangos(capsys):
    """Only the bare listing is ours: `sparkops help up` and `sparkops up --help` are argparse's."""
    done = subprocess.run(
        [sys.executable, "-m", "sparkops.cli", "help", "up"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and "--demo" in done.stdout and "SparkOps commands:" not in done.stdout
