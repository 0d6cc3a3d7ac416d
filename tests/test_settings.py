import multiprocessing
import os
import subprocess
import sys

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from sparkops.env import env_bool, env_list, env_number, env_str, generated_secret_key


@pytest.mark.parametrize("raw,expected", [("1", True), ("yes", True), ("OFF", False), ("", False)])
def test_env_bool_accepts_the_usual_spellings(monkeypatch, raw, expected):
    monkeypatch.setenv("X_FLAG", raw)
    assert env_bool("X_FLAG") is expected


def test_env_bool_refuses_anything_else(monkeypatch):
    monkeypatch.setenv("X_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="X_FLAG='maybe' is not a boolean"):
        env_bool("X_FLAG")


def test_env_number_refuses_garbage_and_too_small(monkeypatch):
    monkeypatch.setenv("X_NUM", "two")
    with pytest.raises(ImproperlyConfigured, match="X_NUM='two' is not a valid float"):
        env_number("X_NUM", 2.0, cast=float)
    monkeypatch.setenv("X_NUM", "0.1")
    with pytest.raises(ImproperlyConfigured, match=r"must be at least 0.5"):
        env_number("X_NUM", 2.0, cast=float, minimum=0.5)
    monkeypatch.setenv("X_NUM", "3")
    assert env_number("X_NUM", 2.0, cast=float) == 3.0


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "Infinity", "1e400"])
def test_env_number_refuses_what_is_not_finite(monkeypatch, raw):
    monkeypatch.setenv("X_NUM", raw)
    with pytest.raises(ImproperlyConfigured, match=f"X_NUM='{raw}' is not a finite number"):
        env_number("X_NUM", 2.0, cast=float, minimum=0.5)


def test_env_number_refuses_too_large(monkeypatch):
    monkeypatch.setenv("X_NUM", "70000")
    with pytest.raises(ImproperlyConfigured, match="X_NUM='70000' must be at most 65535"):
        env_number("X_NUM", 25, minimum=1, maximum=65535)
    monkeypatch.setenv("X_NUM", "65535")
    assert env_number("X_NUM", 25, minimum=1, maximum=65535) == 65535


def test_env_list_and_file_secrets(monkeypatch, tmp_path):
    monkeypatch.setenv("X_LIST", "a, b,,c")
    assert env_list("X_LIST") == ["a", "b", "c"]
    secret = tmp_path / "key"
    secret.write_text("from-a-file\n")
    monkeypatch.setenv("X_SECRET_FILE", str(secret))
    assert env_str("X_SECRET") == "from-a-file"
    monkeypatch.setenv("X_SECRET_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match="X_SECRET_FILE"):
        env_str("X_SECRET")


def test_generated_secret_key_is_kept_private_and_stable(tmp_path):
    path = tmp_path / "var" / "secret_key"
    first = generated_secret_key(path)
    assert len(first) >= 50
    assert generated_secret_key(path) == first
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def _key_when_released(barrier, path, out):
    barrier.wait()
    try:
        out.put(generated_secret_key(path))
    except Exception as exc:  # the test reports what any process met
        out.put(f"{type(exc).__name__}: {exc}")


def test_the_stacks_processes_starting_together_share_one_whole_key(tmp_path):
    # `sparkops up` starts web, worker and beat at once and each reads its settings: every one must
    # get the one key that landed, never an empty file another process has created but not written.
    ctx = multiprocessing.get_context("fork")
    for attempt in range(4):  # the old create-then-write lost about one start in three
        path = tmp_path / f"var{attempt}" / "secret_key"
        barrier, out = ctx.Barrier(12), ctx.Queue()
        procs = [ctx.Process(target=_key_when_released, args=(barrier, path, out)) for _ in range(12)]
        for proc in procs:
            proc.start()
        keys = [out.get(timeout=60) for _ in procs]
        for proc in procs:
            proc.join(timeout=60)
        assert len(set(keys)) == 1 and len(keys[0]) >= 50, keys
        assert path.read_text() == keys[0] and [p.name for p in path.parent.iterdir()] == ["secret_key"]


def _settings_subprocess(env_extra, code):
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY", "POLL")}
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_bad_setting_stops_startup_with_the_variable_named():
    proc = _settings_subprocess(
        {"SPARKOPS_POLL_INTERVAL": "fast", "DJANGO_SETTINGS_MODULE": "sparkops.settings"},
        "import django; django.setup()",
    )
    assert proc.returncode != 0
    assert "SPARKOPS_POLL_INTERVAL='fast' is not a valid float" in proc.stderr


@pytest.mark.parametrize(
    "name,raw,message",
    [
        ("SPARKOPS_POLL_INTERVAL", "nan", "is not a finite number"),
        ("SPARKOPS_POLL_INTERVAL", "inf", "is not a finite number"),
        ("SPARKOPS_FLUSH_INTERVAL", "-inf", "is not a finite number"),
        ("SPARKOPS_POLL_INTERVAL", "1e9", "must be at most 3600"),
        ("SPARKOPS_LOGIN_COOLOFF_S", "99999999999999999999", "must be at most 31536000"),
        ("EMAIL_PORT", "70000", "must be at most 65535"),
        ("SPARKOPS_ALERT_RETRY_BASE_S", "fast", "is not a valid float"),
        ("SPARKOPS_ALERT_RENOTIFY_S", "nan", "is not a finite number"),
        ("SPARKOPS_ALERT_HTTP_TIMEOUT_S", "0", "must be at least 0.1"),
    ],
)
def test_every_numeric_setting_is_finite_and_bounded_at_startup(name, raw, message):
    """Issue 25, item 5: `manage.py check` (start-up) stops, naming the variable, on a number that is not
    finite or out of its bounds, the alert settings too (parsed with the rest, not at the first delivery)."""
    proc = subprocess.run(
        [sys.executable, "manage.py", "check"],
        env={**{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}, name: raw},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0, proc.stdout
    assert f"{name}={raw!r} {message}" in proc.stderr, proc.stderr[-2000:]


def test_alert_settings_are_the_parsed_values(settings):
    from sparkops.alerts import conf

    settings.SPARKOPS_ALERT_RENOTIFY_S = 120.0
    assert conf.renotify_s() == 120.0 and conf.http_timeout_s() == settings.SPARKOPS_ALERT_HTTP_TIMEOUT_S


def test_secret_key_check_refuses_debug_off_without_a_key():
    with override_settings(DEBUG=False, SECRET_KEY=""):
        ids = [m.id for m in run_checks(include_deployment_checks=True)]
    assert "sparkops.E001" in ids
    with override_settings(DEBUG=False, SECRET_KEY="x" * 60):
        ids = [m.id for m in run_checks(include_deployment_checks=True)]
    assert "sparkops.E001" not in ids


def test_check_deploy_passes_with_production_settings(tmp_path):
    env = {
        "DEBUG": "0",
        "SECRET_KEY": "p" * 30 + "Q9-z" * 10,
        "ALLOWED_HOSTS": "ops.example.org",
        "SESSION_COOKIE_SECURE": "1",
        "CSRF_COOKIE_SECURE": "1",
        "SECURE_SSL_REDIRECT": "1",
        "SECURE_HSTS_SECONDS": "31536000",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
        "SECURE_HSTS_PRELOAD": "1",
        "SPARKOPS_VAR_DIR": str(tmp_path),
    }
    proc = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no issues" in proc.stdout
