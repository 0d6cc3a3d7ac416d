"""Three roles, kept as Django groups: viewers read, operators write, admins manage.

Admins are Django superusers (so the admin site works for every model); viewer and
operator are groups. Use `role_required("operator")` on write views."""

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.models import AnonymousUser, Group, User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBase
from django.views import View


class SignedInRequest(HttpRequest):
    """A request past the login middleware: its user is a User, never AnonymousUser. For the
    type checker, on the views that hand request.user to a service (Django makes HttpRequests)."""

    user: User


ROLES = ("viewer", "operator", "admin")
_RANK = {role: rank for rank, role in enumerate(ROLES)}
View_ = TypeVar("View_", bound=Callable[..., HttpResponseBase])


def role_of(user: User | AnonymousUser) -> str | None:
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return None
    if user.is_superuser:
        return "admin"
    names = set(user.groups.values_list("name", flat=True)) if user.pk else set()
    for role in reversed(ROLES):
        if role in names:
            return role
    return "viewer"


def _at_least(current: str | None, role: str) -> bool:
    return current is not None and _RANK[current] >= _RANK[role]


def _refuse_below(current: str | None, role: str) -> None:
    if not _at_least(current, role):
        raise PermissionDenied(f"This needs the {role} role.")


def has_role(user: User | AnonymousUser, role: str) -> bool:
    return _at_least(role_of(user), role)


def require_role(user: User | AnonymousUser, role: str) -> None:
    _refuse_below(role_of(user), role)


def request_role(request: HttpRequest) -> str | None:
    """role_of(request.user), asked of the database once per request: a write view checks the
    role and its page's context shows it. Kept with the user it was read for, so a request
    whose user changes (the login view) reads it again."""
    user = getattr(request, "user", None)
    if user is None:
        return None
    cached = getattr(request, "_sparkops_role", None)
    if cached is None or cached[0] is not user:
        cached = (user, role_of(user))
        request._sparkops_role = cached  # type: ignore[attr-defined]  # a per-request memo
    return cached[1]


def request_has_role(request: HttpRequest, role: str) -> bool:
    return _at_least(request_role(request), role)


def require_request_role(request: HttpRequest, role: str) -> None:
    _refuse_below(request_role(request), role)


def role_required(role: str) -> Callable[[View_], View_]:
    """View decorator: 403 for a signed-in user below ROLE (login itself is enforced by middleware)."""

    def decorator(view: View_) -> View_:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            require_request_role(request, role)
            return view(request, *args, **kwargs)

        # Read by tests/test_access.py to list the write views; mypy types no attributes set on functions.
        wrapper.required_role = role  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]  # wraps() keeps the view's signature

    return decorator


class RoleRequiredMixin(View):
    required_role = "operator"

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        require_request_role(request, self.required_role)
        return super().dispatch(request, *args, **kwargs)


def role_context(request: HttpRequest) -> dict[str, Any]:
    role = request_role(request)
    return {  # one role_of per request (a query for a non-admin), not one per flag or check
        "user_role": role,
        "can_operate": _at_least(role, "operator"),
        "can_admin": role == "admin",
    }


def set_role(user: User, role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    user.is_superuser = user.is_staff = role == "admin"
    user.save(update_fields=["is_superuser", "is_staff"])
    user.groups.remove(*Group.objects.filter(name__in=ROLES))
    if role != "admin":
        user.groups.add(Group.objects.get_or_create(name=role)[0])
