"""`Authorization: Bearer TOKEN` on /api/… and /metrics: the token's user is the request's user,
for reading only. A token never writes: any method but GET/HEAD/OPTIONS is refused (403) before
a view runs, whatever the user's role. A wrong or revoked token is 401, never a login page.
Elsewhere the header is ignored (pages need a session)."""

from collections.abc import Callable
from datetime import timedelta

from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.utils import timezone

from .models import ApiToken

TOKEN_PATHS = ("/api/", "/metrics")
READ_METHODS = {"GET", "HEAD", "OPTIONS"}
LAST_USED_EVERY = timedelta(seconds=60)  # a scrape every 15 s writes last_used_at once a minute


def accepts_token(path: str) -> bool:
    return path.startswith("/api/") or path.rstrip("/") == "/metrics"


def bearer(request: HttpRequest) -> str | None:
    """The token of an `Authorization: Bearer …` header; None without one, "" when malformed."""
    header = request.META.get("HTTP_AUTHORIZATION")
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def unauthorized(message: str) -> JsonResponse:
    response = JsonResponse({"error": message}, status=401)
    response["WWW-Authenticate"] = 'Bearer realm="sparkops", error="invalid_token"'
    return response


class ApiTokenMiddleware:
    """After AuthenticationMiddleware (it replaces request.user), before LoginRequiredMiddleware."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        token = bearer(request) if accepts_token(request.path_info) else None
        if token is None:
            return self.get_response(request)
        row = ApiToken.authenticate(token)
        if row is None:
            return unauthorized("invalid, revoked or malformed API token")
        if request.method not in READ_METHODS:
            return JsonResponse(
                {"error": "API tokens are read-only: this request needs a logged-in session"}, status=403
            )
        request.user = row.user
        request.api_token = row  # type: ignore[attr-defined]  # which token, for the views that ask
        now = timezone.now()
        if row.last_used_at is None or now - row.last_used_at > LAST_USED_EVERY:
            ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
        return self.get_response(request)
