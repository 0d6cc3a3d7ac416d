"""When the database cannot be written or reached: what to tell the person
or the checker, in one line, instead of a bare 500.

`unavailable(exc)` says whether EXC is the database refusing for a reason of its own — it is
gone or cannot be reached, full, read-only, locked past the wait, out of connections — and
gives the one line to show; None for anything else (a bug stays a 500). The root URLconf's
handler500 (`dashboard.views.errors.server_error`) answers those with 503: wherever the error
came from, a view or a middleware (a session saved on the way out, a token's last use), as a
page, or JSON on /api/."""

from django.db import InterfaceError, InternalError, OperationalError

# (what the driver says, in lower case) -> what the line says; the first that matches.
KINDS = (
    (("disk is full", "disk full", "no space left", "could not extend file"), "the database's disk is full"),
    (("readonly database", "read-only transaction", "read only", "read-only"), "the database is read-only"),
    (("database is locked", "lock timeout", "statement timeout"), "the database is locked and did not answer in time"),
    (("too many clients", "too many connections", "pool", "couldn't get a connection"), "no database connection free"),
)


def unavailable(exc):
    """One line saying why the database refused, when EXC is that; else None."""
    if not isinstance(exc, (OperationalError, InterfaceError, InternalError)):
        return None
    if isinstance(exc, InternalError) and not _matches(exc, KINDS[1][0]):
        return None  # an InternalError other than a read-only transaction is a bug
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    for needles, said in KINDS:
        if _matches(exc, needles):
            return f"{said} ({text[:200]})"
    return f"the database cannot be reached ({text[:200]})"


def _matches(exc, needles):
    text = str(exc).lower()
    return any(n in text for n in needles)
