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


def has_role(user, role):
    current = role_of(user)
    return current is not None and _RANK[current] >= _RANK[role]


def require_role(user, role):
    if not has_role(user, role):
        raise PermissionDenied(f"This needs the {role} role.")


def role_required(role):
    """View decorator: 403 for a signed-in user below ROLE (login itself is enforced by middleware)."""

    def decorator(view):
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            require_role(request.user, role)
            return view(request, *args, **kwargs)

        # Read by tests/test_access.py to list the write views; mypy types no attributes set on functions.
        wrapper.required_role = role  # type: ignore[attr-defined]
        return wrapper

    return decorator


class RoleRequiredMixin(View):
    required_role = "operator"

    def dispatch(self, request, *args, **kwargs):
        require_role(request.user, self.required_role)
        return super().dispatch(request, *args, **kwargs)


def role_context(request):
    user = getattr(request, "user", None)
    role = role_of(user) if user is not None else None
    return {  # one role_of per page (a query for a non-admin), not one per flag
        "user_role": role,
        "can_operate": role is not None and _RANK[role] >= _RANK["operator"],
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
