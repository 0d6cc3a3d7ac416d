"""`sparkops token create USER --name N` (the token alone on the last line, shown once),
`sparkops token list [USER] [--json]`, `sparkops token revoke ID`."""

import json
from argparse import ArgumentParser
from typing import Any, TypedDict

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from dashboard.management.base import CliCommand
from dashboard.tokens.models import ApiToken


class TokenItem(TypedDict):
    """One row of `token list --json`: what a token is, never the token itself."""

    id: int
    user: str
    name: str
    prefix: str
    created_at: str
    last_used_at: str | None
    revoked_at: str | None


class Command(CliCommand):
    help = "Read-only API tokens (Authorization: Bearer on /api/… and /metrics): create, list, revoke."

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create a token for USER; it is printed once, on the last line")
        create.add_argument("user")
        create.add_argument("--name", required=True, help="what it is for, e.g. prometheus (plain text)")
        listing = sub.add_parser("list", help="tokens (never the tokens themselves)")
        listing.add_argument("user", nargs="?")
        listing.add_argument("--json", action="store_true")
        revoke = sub.add_parser("revoke", help="revoke a token by its id (see list)")
        revoke.add_argument("id", type=int)

    def handle(self, *args: Any, action, **opts: Any):
        return getattr(self, f"do_{action}")(**opts)

    def _user(self, name):
        try:
            return get_user_model().objects.get(username=name)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user named {name!r}") from None

    def do_create(self, *, user, name, **_: Any):
        owner = self._user(user)
        if not owner.is_active:
            raise CommandError(f"user {user!r} is inactive; a token of theirs would be refused")
        try:
            row, token = ApiToken.issue(owner, name=name)
        except ValidationError as exc:
            raise CommandError(f"--name: {' '.join(exc.messages)}") from None
        self.stdout.write(
            f"created API token {row.id} ({row.prefix}…) for {owner.get_username()}: read-only, "
            "for Authorization: Bearer on /api/ and /metrics. It is shown once, now:"
        )
        self.stdout.write(token)

    def do_list(self, *, user, json: bool, **_: Any) -> None:
        rows = ApiToken.objects.select_related("user")
        if user:
            rows = rows.filter(user=self._user(user))
        items: list[TokenItem] = [
            {
                "id": t.id,
                "user": t.user.get_username(),
                "name": t.name,
                "prefix": t.prefix,
                "created_at": t.created_at.isoformat(),
                "last_used_at": t.last_used_at.isoformat() if t.last_used_at else None,
                "revoked_at": t.revoked_at.isoformat() if t.revoked_at else None,
            }
            for t in rows
        ]
        if json:
            self.stdout.write(_json.dumps(items, indent=2))
            return
        for t in items:
            state = f"revoked {t['revoked_at'][:16]}" if t["revoked_at"] else "active"
            used = t["last_used_at"][:16] if t["last_used_at"] else "never used"
            self.stdout.write(f"{t['id']:>4}  {t['prefix']}…  {t['user']:<16} {t['name'] or '-':<16} {state}, {used}")

    def do_revoke(self, *, id, **_: Any):
        try:
            row = ApiToken.objects.select_related("user").get(pk=id)
        except ApiToken.DoesNotExist:
            raise CommandError(f"no API token with id {id}") from None
        if row.is_revoked:
            raise CommandError(f"API token {id} was already revoked at {row.revoked_at:%Y-%m-%d %H:%M}")
        row.revoke()
        self.stdout.write(f"revoked API token {id} ({row.prefix}…) of {row.user.get_username()}")


_json = json
