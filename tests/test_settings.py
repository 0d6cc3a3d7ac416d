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
    with pytest.raises(ImproperlyConfigured, match="must be at least 0.5"):
        env_number("X_NUM", 2.0, cast=float, minimum=0.5)
    monkeypatch.setenv("X_NUM", "3")
    assert env_number("X_NUM", 2.0, cast=float) == 3.0


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


def _settings_subprocess(env_extra, code):
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY", "POLL")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_bad_setting_stops_startup_with_the_variable_named():
    proc = _settings_subprocess(
        {"SPARKOPS_POLL_INTERVAL": "fast", "DJANGO_SETTINGS_MODULE": "sparkops.settings"},
        "import django; django.setup()",
    )
    assert proc.returncode != 0
    assert "SPARKOPS_POLL_INTERVAL='fast' is not a valid float" in proc.stderr


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
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no issues" in proc.stdout
