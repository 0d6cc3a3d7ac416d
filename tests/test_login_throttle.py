"""Login throttling (django-axes): a user name is locked out from one address after
SPARKOPS_LOGIN_FAILURE_LIMIT failures, for SPARKOPS_LOGIN_COOLOFF_S, on the login page and on
/admin/login/ alike; `sparkops user unlock NAME` and the Django admin lift it; failures are logged."""

import logging
from datetime import timedelta
from io import StringIO

import pytest
from axes.models import AccessAttempt, AccessFailureLog
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

pytestmark = pytest.mark.django_db

HOME, OTHER = "10.1.2.3", "10.9.8.7"


def _login(user, password, address=HOME, url="/login/"):
    return Client(REMOTE_ADDR=address).post(
        url, {"username": user if isinstance(user, str) else user.username, "password": password}
    )


def _right(user):
    return f"{user.username}-password-123"


def _fail(user, times, address=HOME, url="/login/"):
    return [_login(user, "not-the-password", address, url).status_code for _ in range(times)]


def _locked_page(response, name):
    text = response.content.decode()
    assert response.status_code == 429, response.status_code
    assert "Account locked" in text and name in text
    assert "15 minutes" in text, text  # the default cool-off, said in words
    return text


def test_defaults_are_five_failures_and_fifteen_minutes():
    assert settings.AXES_FAILURE_LIMIT == 5
    assert timedelta(seconds=900) == settings.AXES_COOLOFF_TIME
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]


def test_wrong_passwords_then_the_right_one_is_refused_with_the_message(viewer, caplog):
    assert _login(viewer, _right(viewer)).status_code == 302  # works before
    caplog.set_level(logging.WARNING, logger="axes")
    codes = _fail(viewer, 5)
    assert codes == [200, 200, 200, 200, 429]  # the fifth failure already answers with the lock
    _locked_page(_login(viewer, _right(viewer)), "vera")
    # Failures are logged (the log line names the user and the address) and kept for the admin.
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("axes")]
    assert any("login failure" in line and "vera" in line and HOME in line for line in lines), lines
    assert any("Locking out" in line for line in lines), lines
    assert AccessFailureLog.objects.filter(username="vera", ip_address=HOME).count() == 6
    assert "not-the-password" not in AccessAttempt.objects.get(username="vera").post_data


def test_the_lock_is_per_user_and_address_pair(viewer, operator):
    _fail(viewer, 5)
    assert _login(viewer, _right(viewer)).status_code == 429
    assert _login(operator, _right(operator)).status_code == 302, "another user from the same address is locked"
    assert _login(viewer, _right(viewer), address=OTHER).status_code == 302, "the same user from elsewhere is locked"


def test_a_good_login_forgets_earlier_failures(viewer):
    _fail(viewer, 4)
    assert _login(viewer, _right(viewer)).status_code == 302
    assert _fail(viewer, 4) == [200] * 4  # counted from zero again


def test_the_lock_lifts_after_the_cool_off(viewer):
    _fail(viewer, 5)
    assert _login(viewer, _right(viewer)).status_code == 429
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(seconds=901))
    assert _login(viewer, _right(viewer)).status_code == 302


def test_cli_unlock_lets_the_user_in(viewer):
    _fail(viewer, 5)
    assert _login(viewer, _right(viewer)).status_code == 429
    out = StringIO()
    call_command("user", "unlock", "vera", stdout=out)
    assert "unlocked vera" in out.getvalue()
    assert _login(viewer, _right(viewer)).status_code == 302
    out = StringIO()
    call_command("user", "unlock", "vera", stdout=out)
    assert "vera was not locked" in out.getvalue()


def test_cli_unlock_of_an_unknown_name_fails_and_changes_nothing(viewer):
    _fail(viewer, 5)
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        call_command("user", "unlock", "nobody", stdout=StringIO())
    assert AccessAttempt.objects.filter(username="vera").exists()
    assert _login(viewer, _right(viewer)).status_code == 429


def test_cli_unlock_clears_a_name_without_an_account():
    """Someone hammering a name that does not exist yet: unlocking it is still possible."""
    _fail("ghost", 5)
    out = StringIO()
    call_command("user", "unlock", "ghost", stdout=out)
    assert "unlocked ghost" in out.getvalue()
    assert not AccessAttempt.objects.filter(username="ghost").exists()


def test_admin_login_is_throttled_too(admin_user):
    codes = _fail(admin_user, 5, url="/admin/login/")
    assert codes[-1] == 429 and codes[:4] == [200] * 4
    _locked_page(_login(admin_user, _right(admin_user), url="/admin/login/"), "ada")
    # One lock for the pair: the main login page refuses it too.
    assert _login(admin_user, _right(admin_user)).status_code == 429


def test_admin_unlocks_from_the_django_admin(viewer, admin_user):
    _fail(viewer, 5)
    admin = Client(REMOTE_ADDR=OTHER)
    admin.force_login(admin_user)
    page = admin.get("/admin/axes/accessattempt/")
    assert page.status_code == 200 and "vera" in page.content.decode()
    attempt = AccessAttempt.objects.get(username="vera")
    done = admin.post(
        "/admin/axes/accessattempt/", {"action": "delete_selected", "_selected_action": [attempt.pk], "post": "yes"}
    )
    assert done.status_code == 302
    assert _login(viewer, _right(viewer)).status_code == 302


def test_limits_are_settings(settings, viewer):
    settings.AXES_FAILURE_LIMIT = 2
    assert _fail(viewer, 2) == [200, 429]


@pytest.mark.parametrize(
    "name,value,message",
    [
        ("SPARKOPS_LOGIN_FAILURE_LIMIT", "0", "must be at least 1"),
        ("SPARKOPS_LOGIN_COOLOFF_S", "soon", "is not a valid int"),
    ],
)
def test_bad_limit_settings_stop_startup(name, value, message):
    from tests.test_settings import _settings_subprocess

    proc = _settings_subprocess(
        {name: value, "DJANGO_SETTINGS_MODULE": "sparkops.settings"}, "import django; django.setup()"
    )
    assert proc.returncode != 0
    assert f"{name}={value!r} {message}" in proc.stderr
