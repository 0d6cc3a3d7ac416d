"""Every URL needs a login (but login and /healthz); every write view refuses viewers.
URL patterns are enumerated from the resolver, not hand-listed."""

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

# The web app manifest too: a browser fetches it without the session cookie, and it holds
# nothing but the app's name, colours and icons.
PUBLIC = {"login", "healthz", "livez", "web-manifest", "alerts:inbox-receive", "docs", "docs-page"}
# docs: the manual (the built documentation site), public like the static files: it holds nothing
# of the install, and a person locked out needs it most.
# alerts:inbox-receive: the local inbox's webhook receiver; its credential is the channel's HMAC
# signature, not a session (tests/alerts/test_inbox.py refuses the unsigned).
# For scrapers: no login page, 401 without an API token (tests/test_metrics_tokens.py).
TOKEN_ONLY = {"metrics"}
SAMPLE_ARGS = {
    "int": "1",
    "id": "1",
    "str": "x",
    "slug": "x",
    "uuid": "00000000-0000-0000-0000-000000000000",
    "path": "x",
}


def _walk(patterns, prefix="", namespace=None):
    for p in patterns:
        route = prefix + str(p.pattern)
        if isinstance(p, URLResolver):
            ns = p.namespace or namespace
            yield from _walk(p.url_patterns, route, ns)
        elif isinstance(p, URLPattern):
            name = f"{namespace}:{p.name}" if namespace and p.name else p.name
            yield route, name, p.callback


def _sample_path(route):
    route = re.sub(r"<(?:(\w+):)?\w+>", lambda m: SAMPLE_ARGS.get(m.group(1) or "str", "x"), route)
    route = route.lstrip("^").rstrip("$").replace("\\Z", "").replace("\\", "")
    return "/" + route


def _app_patterns():
    for route, name, callback in _walk(get_resolver().url_patterns):
        if route.startswith("admin/") or route.startswith("static/") or "(?P" in route:
            continue
        yield route, name, callback


def _required_role(callback):
    view_class = getattr(callback, "view_class", None)
    return getattr(callback, "required_role", None) or getattr(view_class, "required_role", None)


def test_there_are_patterns_to_check():
    names = {name for _, name, _ in _app_patterns()}
    assert {"overview", "engine-list", "healthz", "login"} <= names


@pytest.mark.django_db
def test_anonymous_is_sent_to_login_everywhere_but_login_and_healthz(client):
    for route, name, _ in _app_patterns():
        if name in PUBLIC:
            continue
        path = _sample_path(route)
        if name in TOKEN_ONLY:
            assert client.get(path).status_code == 401 and client.post(path).status_code == 401, name
            continue
        response = client.get(path)
        assert response.status_code == 302, f"{name} ({path}) answered {response.status_code} to anonymous"
        assert response["Location"].startswith("/login/"), f"{name} ({path}) redirects elsewhere"
        response = client.post(path)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), f"POST {name}"


@pytest.mark.django_db
def test_login_and_healthz_are_public(client):
    assert client.get("/login/").status_code == 200
    assert client.get("/healthz").status_code in (200, 503)


@pytest.mark.django_db
def test_viewer_gets_403_on_every_write_view(viewer_client):
    write_views = [(route, name) for route, name, cb in _app_patterns() if _required_role(cb) in ("operator", "admin")]
    assert len(write_views) >= 10, f"expected the write views to carry required_role, found {write_views}"
    for route, name in write_views:
        path = _sample_path(route)
        response = viewer_client.post(path, {})
        assert response.status_code == 403, f"viewer POST {name} ({path}) answered {response.status_code}"


@pytest.mark.django_db
def test_admin_site_needs_admin_role(viewer_client):
    response = viewer_client.get("/admin/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


@pytest.mark.django_db
def test_a_write_page_asks_for_the_users_role_once(operator_client, operator):
    """The view's role check and the page's context (its nav's write links) share one read of
    the user's groups; the next request reads it again, so a changed role counts at once."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from dashboard.roles import set_role

    with CaptureQueriesContext(connection) as queries:
        response = operator_client.get("/changelog/new/")
    assert response.status_code == 200 and response.context["can_operate"] is True
    group_reads = [q["sql"] for q in queries.captured_queries if "auth_user_groups" in q["sql"]]
    assert len(group_reads) == 1, group_reads

    set_role(operator, "viewer")
    assert operator_client.get("/changelog/new/").status_code == 403
    set_role(operator, "operator")
    assert operator_client.get("/changelog/new/").status_code == 200
