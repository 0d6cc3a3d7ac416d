"""Logins under a burst (issue 46, item 4): 50 people who have never logged in post the login
form at once to a real web server (uvicorn, the product's settings: PBKDF2 at a million rounds)
whose pool is small, and all 50 get in: the password hash runs with no pooled connection held
(dashboard/authbackend.py). Before, Django's ModelBackend hashed with the user's connection
checked out, and the burst held the whole pool: 14 of 50 answered 503 with a pool of 10
(bench/login_burst.py --django-backend).

The users' hashes are the suite's one-round ones (tests/hashers.py): the server verifies one
round and, as Django does for a hash below the product's rounds, hashes the password again at a
million and saves it: the real cost of a login, inside the login."""

import asyncio
import os
import re

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.hashers import check_password
from django.db import connection

from dashboard.roles import set_role
from sparkops import webproc

CLIENTS = 50
POOL_MAX = 4
PASSWORD = "burst-password-123"
TOKEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


async def _login(base, username):
    async with httpx.AsyncClient(base_url=base, timeout=300) as client:
        token = TOKEN.search((await client.get("/login/")).text).group(1)
        form = {"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token}
        answer = await client.post("/login/", data=form)
        return answer.status_code, answer.headers.get("location", ""), answer.text[:300]


async def _all_at_once(base, names):
    return await asyncio.gather(*(_login(base, name) for name in names))


def _web_env(tmp_path):
    d = connection.settings_dict
    if connection.vendor == "postgresql":
        url = f"postgres://{d['USER']}@{d['HOST'] or '127.0.0.1'}:{d['PORT'] or 5432}/{d['NAME']}"
    else:
        url = f"sqlite:///{d['NAME']}"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "sparkops.settings",
        "SECRET_KEY": settings.SECRET_KEY,
        "SPARKOPS_DB_POOL_MAX": str(POOL_MAX),
        "SPARKOPS_VAR_DIR": str(tmp_path / "var"),
    }
    env.pop("SPARKOPS_TEST_DB_NAME", None)
    return env


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_fifty_first_logins_at_once_all_get_in(tmp_path, django_user_model):
    names = [f"burst-{i}" for i in range(CLIENTS)]
    for name in names:
        set_role(django_user_model.objects.create_user(name, password=PASSWORD), "viewer")
    proc, base = webproc.start_web(env=_web_env(tmp_path), log_path=tmp_path / "web.log", timeout=60)
    try:
        answers = asyncio.run(_all_at_once(base, names))
    finally:
        webproc.stop_web(proc)
    refused = [a for a in answers if a[0] != 302]
    assert not refused, (
        f"{len(refused)} of {CLIENTS} not in: {refused[:3]}\n{(tmp_path / 'web.log').read_text()[-2000:]}"
    )
    assert {location for _, location, _ in answers} == {"/"}  # each to the overview, logged in
    users = django_user_model.objects.filter(username__in=names)
    assert users.filter(last_login__isnull=False).count() == CLIENTS
    # The server hashed each again at the product's rounds (the cost the burst paid), and saved it.
    stored = users.first().password
    assert stored.startswith("pbkdf2_sha256$1000000$") and check_password(PASSWORD, stored)
