"""Three roles, kept as Django groups: viewers read, operators write, admins manage.

Admins are Django superusers (so the admin site works for every model); viewer and
operator are groups. Use `role_required("operator")` on write views."""

from functools import wraps

from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.views import View

ROLES = ("viewer", "operator", "admin")
_RANK = {role: rank for rank, role in enumerate(ROLES)}


def role_of(user):
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return None
    if user.is_superuser:
        return "admin"
    names = set(user.groups.values_list("name", flat=True)) if user.pk else set()
    for role in reversed(ROLES):
        if role in names:
            return role
    return "viewer"


def _at_least(current, role):
    return current is not None and _RANK[current] >= _RANK[role]


def _refuse_below(current, role):
    if not _at_least(current, role):
        raise PermissionDenied(f"This needs the {role} role.")


def has_role(user, role):
    return _at_least(role_of(user), role)


def require_role(user, role):
    _refuse_below(role_of(user), role)


def request_role(request):
    """role_of(request.user), asked of the database once per request: a write view checks the
    role and its page's context shows it. Kept with the user it was read for, so a request
    whose user changes (the login view) reads it again."""
    user = getattr(request, "user", None)
    if user is None:
        return None
    cached = getattr(request, "_sparkops_role", None)
    if cached is None or cached[0] is not user:
        cached = (user, role_of(user))
        request._sparkops_role = cached
    return cached[1]


def request_has_role(request, role):
    return _at_least(request_role(request), role)


def require_request_role(request, role):
    _refuse_below(request_role(request), role)


def role_required(role):
    """View decorator: 403 for a signed-in user below ROLE (login itself is enforced by middleware)."""

    def decorator(view):
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            require_request_role(request, role)
            return view(request, *args, **kwargs)

        # Read by tests/test_access.py to list the write views; mypy types no attributes set on functions.
        wrapper.required_role = role  # type: ignore[attr-defined]
        return wrapper

    return decorator


class RoleRequiredMixin(View):
    required_role = "operator"

    def dispatch(self, request, *args, **kwargs):
        require_request_role(request, self.required_role)
        return super().dispatch(request, *args, **kwargs)


def role_context(request):
    role = request_role(request)
    return {  # one role_of per request (a query for a non-admin), not one per flag or check
        "user_role": role,
        "can_operate": _at_least(role, "operator"),
        "can_admin": role == "admin",
    }


def set_role(user, role):
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    user.is_superuser = user.is_staff = role == "admin"
    user.save(update_fields=["is_superuser", "is_staff"])
    user.groups.remove(*Group.objects.filter(name__in=ROLES))
    if role != "admin":
        user.groups.add(Group.objects.get_or_create(name=role)[0])
