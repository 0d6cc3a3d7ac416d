"""Every CLI command, through the real `sparkops` console script's code path, errors included."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from dashboard.models import Engine
from dashboard.roles import role_of
from sparkops.alerts.models import NotificationChannel


def run(*args):
    from io import StringIO

    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_engine_add_list_remove():
    out = run(
        "engine",
        "add",
        "vllm-main",
        "--kind",
        "vllm",
        "--url",
        "http://127.0.0.1:8001/",
        "--unit",
        "vllm-main.service",
        "--host",
        "spark-1",
    )
    assert "added engine vllm-main" in out
    engine = Engine.objects.get(name="vllm-main")
    assert (engine.url, engine.unit, engine.host.name) == ("http://127.0.0.1:8001", "vllm-main.service", "spark-1")
    listed = json.loads(run("engine", "list", "--json"))
    assert [e["name"] for e in listed] == ["vllm-main"] and listed[0]["unit"] == "vllm-main.service"
    assert "vllm-main" in run("engine", "list")
    assert "retired engine vllm-main" in run("engine", "remove", "vllm-main")
    assert Engine.objects.get().retired_at is not None  # retired, not deleted: history points at it


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args,message",
    [
        (["--kind", "vllm", "--url", "not a url"], "url: Enter a valid URL"),
        (["--kind", "vllm", "--url", "ftp://127.0.0.1/"], "url"),
        (["--kind", "vllm", "--url", "http://127.0.0.1:1", "--interval", "0.1"], "poll interval below 0.5"),
    ],
)
def test_engine_add_refuses_bad_input_and_writes_nothing(args, message):
    with pytest.raises(CommandError, match=message):
        run("engine", "add", "e1", *args)
    assert not Engine.objects.exists()


@pytest.mark.django_db
def test_engine_add_refuses_unknown_kind_and_bad_name(capsys):
    with pytest.raises(CommandError, match="invalid choice: 'tgi'"):
        run("engine", "add", "e1", "--kind", "tgi", "--url", "http://127.0.0.1:1")
    with pytest.raises(CommandError, match="name"):
        run("engine", "add", "bad name!", "--kind", "vllm", "--url", "http://127.0.0.1:1")
    assert not Engine.objects.exists()


@pytest.mark.django_db
def test_engine_add_refuses_duplicate_names():
    run("engine", "add", "e1", "--kind", "vllm", "--url", "http://127.0.0.1:1")
    with pytest.raises(CommandError, match="already exists"):
        run("engine", "add", "e1", "--kind", "llamacpp", "--url", "http://127.0.0.1:2")
    assert Engine.objects.get().kind == "vllm"


@pytest.mark.django_db
@pytest.mark.parametrize("interval, bound", [("0", "below 0.5 s"), ("1e9", "less than or equal to 3600")])
def test_an_absurd_poll_interval_is_refused_and_nothing_is_added(interval, bound):
    with pytest.raises(CommandError, match=bound):
        run("engine", "add", "vllm-main", "--kind", "vllm", "--url", "http://127.0.0.1:8001/", "--interval", interval)
    assert not Engine.objects.exists()
    run("engine", "add", "vllm-main", "--kind", "vllm", "--url", "http://127.0.0.1:8001/", "--interval", "30")
    assert Engine.objects.get().poll_interval_s == 30


@pytest.mark.django_db
def test_engine_remove_unknown():
    with pytest.raises(CommandError, match="no engine named 'ghost'"):
        run("engine", "remove", "ghost")


@pytest.mark.django_db
def test_channel_add_and_list():
    run("channel", "add", "ops-mail", "--email", "ops@example.org")
    run("channel", "add", "ops-hook", "--webhook", "https://hooks.example.org/x", "--secret", "k")
    listed = {c["name"]: c for c in json.loads(run("channel", "list", "--json"))}
    assert listed["ops-mail"]["target"] == "ops@example.org" and not listed["ops-mail"]["signed"]
    assert listed["ops-hook"]["target"] == "https://hooks.example.org/x" and listed["ops-hook"]["signed"]
    assert NotificationChannel.objects.get(name="ops-hook").secret == "k"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args,message",
    [
        (["--email", "not-an-address"], "valid address"),
        (["--webhook", "gopher://x"], "http:// or https://"),
        (["--email", "a@b.org", "--secret", "k"], "webhooks only"),
    ],
)
def test_channel_add_refuses_bad_input(args, message):
    with pytest.raises(CommandError, match=message):
        run("channel", "add", "c1", *args)
    assert not NotificationChannel.objects.exists()


@pytest.mark.django_db
def test_channel_add_refuses_duplicates():
    run("channel", "add", "c1", "--email", "a@b.org")
    with pytest.raises(CommandError, match="already exists"):
        run("channel", "add", "c1", "--email", "c@d.org")


@pytest.mark.django_db
def test_user_add_with_each_role(tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("a-long-enough-password\n")
    for name, role in (("v", "viewer"), ("o", "operator"), ("a", "admin")):
        run("user", "add", name, "--role", role, "--password-file", str(pw))
        user = get_user_model().objects.get(username=name)
        assert role_of(user) == role
        assert user.check_password("a-long-enough-password")


@pytest.mark.django_db
def test_user_add_refuses_weak_password_duplicates_and_missing_file(tmp_path):
    weak = tmp_path / "weak"
    weak.write_text("short\n")
    with pytest.raises(CommandError, match="too short"):
        run("user", "add", "v", "--role", "viewer", "--password-file", str(weak))
    assert not get_user_model().objects.exists()
    with pytest.raises(CommandError, match="cannot read a password"):
        run("user", "add", "v", "--role", "viewer", "--password-file", str(tmp_path / "missing"))
    good = tmp_path / "good"
    good.write_text("a-long-enough-password")
    run("user", "add", "v", "--role", "viewer", "--password-file", str(good))
    with pytest.raises(CommandError, match="already exists"):
        run("user", "add", "v", "--role", "admin", "--password-file", str(good))
    assert role_of(get_user_model().objects.get(username="v")) == "viewer"


def test_commands_that_do_one_thing_skip_the_system_checks_and_the_servers_run_them(monkeypatch):
    """`sparkops engine list` and the like do not pay for the URLconf's import (dashboard/management/
    base.py); `up` and `worker` still check the install before they serve. Told apart by running each
    command's `execute` with a check registered that always fails."""
    from django.core import checks
    from django.core.management import get_commands, load_command_class
    from django.core.management.base import SystemCheckError

    registry = checks.registry.CheckRegistry()
    registry.register(lambda app_configs, **kw: [checks.Error("always fails", id="test.E001")])
    monkeypatch.setattr(checks.registry, "registry", registry)
    monkeypatch.setattr(checks, "run_checks", registry.run_checks)
    ours = sorted(name for name, app in get_commands().items() if app == "dashboard")
    quick = {name for name in ours if load_command_class("dashboard", name).requires_system_checks == []}
    assert {"engine", "alerts", "launch", "changelog", "ledger", "token", "user"} <= quick, quick
    assert {"up", "worker"}.isdisjoint(quick), quick
    for name in ("up", "worker"):
        command = load_command_class("dashboard", name)
        monkeypatch.setattr(command, "handle", lambda *a, **kw: "")
        with pytest.raises(SystemCheckError, match="always fails"):
            command.execute(force_color=False, no_color=True, skip_checks=False, verbosity=0)
    for name in ("engine", "token"):
        command = load_command_class("dashboard", name)
        monkeypatch.setattr(command, "handle", lambda *a, **kw: "")
        command.execute(force_color=False, no_color=True, skip_checks=False, verbosity=0)  # no SystemCheckError
