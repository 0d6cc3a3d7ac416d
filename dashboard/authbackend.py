"""Logins check a password without holding a database connection (issue 46, item 4).

Django's ModelBackend fetches the user and then runs the password hash (PBKDF2, a million
rounds: a few hundred ms of CPU, seconds when fifty run at once on two cores) with the
connection it fetched the user with still checked out of the pool. With PostgreSQL's bounded
pool (SPARKOPS_DB_POOL_MAX), a burst of logins held every pooled connection through their
hashes: 11 of 50 simultaneous first logins waited SPARKOPS_DB_POOL_TIMEOUT_S and got a 503.
Here the user is fetched, the connection goes back to the pool, and only then is the hash run;
the writes after a good login (a rehash, last_login, the session) borrow one again briefly."""

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.db import connections, router


class PoolFriendlyModelBackend(ModelBackend):
    """ModelBackend, with the password checked while no pooled connection is held."""

    def authenticate(
        self,
        request: Any,  # noqa: ARG002 (ModelBackend's signature)
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> User | None:
        model = get_user_model()
        if username is None:
            username = kwargs.get(model.USERNAME_FIELD)
        if username is None or password is None:
            return None
        try:
            user = model._default_manager.get_by_natural_key(username)
        except model.DoesNotExist:
            user = None
        connection_give_back(alias=router.db_for_read(model))
        if user is None:
            # As ModelBackend does: hash anyway, so an unknown name takes as long as a wrong password.
            model().set_password(password)
            return None
        if user.check_password(password) and self.user_can_authenticate(user):
            return user
        return None


def connection_give_back(*, alias: str) -> bool:
    """Return ALIAS's connection to its pool now, when it has one and no transaction is open
    (closing inside one would mark it for rollback); the next query borrows one again. Whether
    it was given back. Without a pool (SQLite) there is nothing to free: the connection stays."""
    conn = connections[alias]
    if conn.connection is None or conn.in_atomic_block or not getattr(conn, "pool", None):
        return False
    conn.close()
    return True
