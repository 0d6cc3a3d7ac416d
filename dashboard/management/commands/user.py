import getpass
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from axes.models import AccessAttempt
from axes.utils import reset
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError
from django.db import transaction

from dashboard.management.base import CliCommand
from dashboard.roles import ROLES, set_role


class Command(CliCommand):
    help = "Add a user with a role (viewer, operator, admin), or unlock one locked out by failed logins."

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="add a user")
        add.add_argument("name")
        add.add_argument("--role", required=True, choices=ROLES)
        add.add_argument("--email", default="")
        add.add_argument("--password-file", help="read the password from this file (first line)")
        unlock = sub.add_parser("unlock", help="clear a user's failed logins, from every address, so it can log in now")
        unlock.add_argument("name")

    def handle(self, *args: Any, action, **options: Any):
        if action == "unlock":
            return self.unlock(options["name"])
        return self.add(**options)

    def unlock(self, name):

        known = get_user_model().objects.filter(username=name).exists()
        if not known and not AccessAttempt.objects.filter(username=name).exists():
            raise CommandError(f"no user named {name!r}, and no failed logins recorded for that name")
        cleared = reset(username=name)
        if cleared:
            self.stdout.write(f"unlocked {name} (cleared {cleared} failed-login record{'s' if cleared != 1 else ''})")
        else:
            self.stdout.write(f"{name} was not locked (no failed logins recorded)")

    def add(self, *, name, role, email, password_file, **_: Any):
        User = get_user_model()
        if User.objects.filter(username=name).exists():
            raise CommandError(f"a user named {name!r} already exists")
        password = self._password(password_file)
        user = User(username=name, email=email)
        try:
            User._meta.get_field("username").run_validators(name)
            validate_password(password, user)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        with transaction.atomic():
            user.set_password(password)
            user.save()
            set_role(user, role)
        self.stdout.write(f"added {role} {name}")

    def _password(self, password_file):
        if password_file:
            try:
                return Path(password_file).read_text().splitlines()[0]
            except (OSError, IndexError) as exc:
                raise CommandError(f"cannot read a password from {password_file}: {exc}") from None
        first = getpass.getpass("Password: ")
        if first != getpass.getpass("Password (again): "):
            raise CommandError("the passwords differ")
        return first
