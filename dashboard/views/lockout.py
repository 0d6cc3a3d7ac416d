"""The page django-axes answers with (HTTP 429) when a user name is locked out from an address."""

from datetime import datetime, timedelta
from typing import Any

from axes.helpers import get_client_ip_address, get_client_username, get_cool_off
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone


def remaining(username: str, ip_address: str | None, *, now: datetime | None = None) -> timedelta:
    """How long USERNAME stays locked out from IP_ADDRESS (the cool-off after its latest attempt)."""
    cool_off = get_cool_off() or timedelta(0)
    latest = AccessAttempt.objects.filter(username=username, ip_address=ip_address).aggregate(t=Max("attempt_time"))[
        "t"
    ]
    if latest is None:
        return cool_off
    return max(timedelta(0), latest + cool_off - (now or timezone.now()))


def say_duration(delta: timedelta) -> str:
    """'15 minutes', '1 minute', '40 seconds', '2 hours 5 minutes': what a person reads."""
    seconds = max(1, round(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = -(-seconds // 60)  # rounded up: never promise less than the lock holds
    hours, minutes = divmod(minutes, 60)
    parts = [f"{hours} hour{'s' if hours != 1 else ''}"] if hours else []
    if minutes:
        parts.append(f"{minutes} minute{'s' if minutes != 1 else ''}")
    return " ".join(parts)


def login_username(request: HttpRequest, credentials: dict[str, Any] | None = None) -> Any:
    """The user name django-axes records (AXES_USERNAME_CALLABLE): as typed, cut to what its rows hold.

    A 5,000-character user name would otherwise fail the AccessAttempt insert (varchar 255) and
    the login page would answer 500; no real user name is that long (Django's hold 150)."""
    username = credentials.get("username") if credentials else getattr(request, "data", request.POST).get("username")
    return username[: AccessAttempt._meta.get_field("username").max_length] if isinstance(username, str) else username


def lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None = None,  # noqa: ARG001 (axes' lockout callable)
    credentials: dict[str, Any] | None = None,
) -> HttpResponse:

    username = get_client_username(request, credentials) or ""
    left = remaining(username, get_client_ip_address(request))
    context = {
        "locked_username": username,
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "remaining": say_duration(left),
        "until": timezone.now() + left,
    }
    return render(request, "registration/locked_out.html", context, status=settings.AXES_HTTP_RESPONSE_CODE)
