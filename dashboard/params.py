"""Query parameters read safely: every view that takes a number from the URL's query reads it here.

`int(request.GET["a"])` takes "99999999999999999999999" happily, and the database then fails
with an OverflowError (SQLite) or "integer out of range" (PostgreSQL): a 500. `int_param`
accepts only a plain whole number inside the range given (by default the range of a database
id, 1 to 2**63 - 1) and otherwise raises ParamError, whose message names the parameter and
says what it must be, for the view to show with a 400."""

import re
from collections.abc import Mapping

from django.http import HttpRequest
from django.utils.http import url_has_allowed_host_and_scheme

DB_INT_MAX = 2**63 - 1  # BigAutoField, SQLite INTEGER, PostgreSQL bigint
_WHOLE = re.compile(r"[+-]?[0-9]{1,20}")


class ParamError(ValueError):
    """A query parameter that cannot be used; the message is for the user."""


def int_param(
    params: Mapping[str, str],
    name: str,
    *,
    default: int | None = None,
    minimum: int = 1,
    maximum: int = DB_INT_MAX,
    required: bool = False,
) -> int | None:
    """PARAMS[NAME] (a QueryDict; the last value when repeated) as an int in [MINIMUM, MAXIMUM].

    Missing or blank: DEFAULT, or ParamError when REQUIRED. Anything else that is not a whole
    number in range: ParamError."""
    raw = params.get(name)
    text = (raw or "").strip()
    if not text:
        if required:
            raise ParamError(f"{name} is required: a whole number from {minimum} to {maximum}.")
        return default
    if not _WHOLE.fullmatch(text) or not minimum <= int(text) <= maximum:
        shown = text if len(text) <= 40 else text[:40] + "…"
        raise ParamError(f"{name} must be a whole number from {minimum} to {maximum}, not {shown!r}.")
    return int(text)


def safe_next(request: HttpRequest) -> str | None:
    """The form's `next` (where to go back to) when it is a path on this site, else None.

    Only a path ("/alerts/3/"): Django's redirect() would take "1" or "nan" for a URL name and
    fail with NoReverseMatch (a 500), and another site's address would be an open redirect."""
    target = request.POST.get("next", "")
    if target.startswith("/") and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return None
