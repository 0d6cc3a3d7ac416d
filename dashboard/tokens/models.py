"""ApiToken: the token itself is never stored, only its SHA-256 digest; what identifies it to a
person is its id, its name and its first characters (`prefix`)."""

import hashlib
import secrets

from django.conf import settings
from django.contrib.auth.models import User
from django.db import models
from django.utils import timezone

from dashboard.names import NameValidator

TOKEN_PREFIX = "spk_"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class ApiTokenQuerySet(models.QuerySet):
    def active(self) -> "ApiTokenQuerySet":
        return self.filter(revoked_at__isnull=True, user__is_active=True)


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(
        max_length=100, validators=[NameValidator(slug=False)], help_text="What it is for, e.g. 'prometheus'"
    )
    prefix = models.CharField(max_length=12, editable=False, help_text="The token's first characters")
    digest = models.CharField(max_length=64, unique=True, editable=False, help_text="SHA-256 of the token")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["user__username", "created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user.get_username()}{', ' + self.name if self.name else ''})"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    @classmethod
    def issue(cls, user: User, *, name: str) -> tuple["ApiToken", str]:
        """Create a token for USER called NAME; returns (row, token). The token exists only in
        this answer. ValidationError (nothing created) when NAME is not a name a person can read
        (dashboard/names.py) or is too long: the page, the CLI and the admin all come here."""
        NameValidator(slug=False)(name)  # first: its message for "", not the field's "cannot be blank"
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        row = cls(user=user, name=name, prefix=token[: len(TOKEN_PREFIX) + 6], digest=digest(token))
        row.full_clean(exclude=["user", "prefix", "digest"])
        row.save()
        return row, token

    @classmethod
    def authenticate(cls, token: str | None) -> "ApiToken | None":
        """The active token row for TOKEN, or None."""
        if not token or len(token) > 200:
            return None
        return cls.objects.active().select_related("user").filter(digest=digest(token)).first()

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])
