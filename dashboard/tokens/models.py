"""ApiToken: the token itself is never stored, only its SHA-256 digest; what identifies it to a
person is its id, its name and its first characters (`prefix`)."""

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

TOKEN_PREFIX = "spk_"


def digest(token):
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class ApiTokenQuerySet(models.QuerySet):
    def active(self):
        return self.filter(revoked_at__isnull=True, user__is_active=True)


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True, help_text="What it is for, e.g. 'prometheus'")
    prefix = models.CharField(max_length=12, editable=False, help_text="The token's first characters")
    digest = models.CharField(max_length=64, unique=True, editable=False, help_text="SHA-256 of the token")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["user__username", "created_at"]
        verbose_name = "API token"

    def __str__(self):
        return f"{self.prefix}… ({self.user.get_username()}{', ' + self.name if self.name else ''})"

    @property
    def is_revoked(self):
        return self.revoked_at is not None

    @classmethod
    def issue(cls, user, name=""):
        """Create a token for USER; returns (row, token). The token exists only in this answer."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        row = cls.objects.create(user=user, name=name, prefix=token[: len(TOKEN_PREFIX) + 6], digest=digest(token))
        return row, token

    @classmethod
    def authenticate(cls, token):
        """The active token row for TOKEN, or None."""
        if not token or len(token) > 200:
            return None
        return cls.objects.active().select_related("user").filter(digest=digest(token)).first()

    def revoke(self):
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])
