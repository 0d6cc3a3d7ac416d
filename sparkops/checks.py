"""System checks that refuse unsafe production settings."""

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured

INSECURE_KEY_PREFIX = "insecure-debug-only"


@register(Tags.security, deploy=True)
def secret_key_check(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> Sequence[CheckMessage]:  # noqa: ARG001 (a system check's signature)
    try:
        key = settings.SECRET_KEY or ""
    except ImproperlyConfigured:  # Django refuses to hand out an empty key
        key = ""
    if not settings.DEBUG and (not key or key.startswith(INSECURE_KEY_PREFIX)):
        return [
            Error(
                "SECRET_KEY is not set while DEBUG is off.",
                hint="Set SECRET_KEY (or SECRET_KEY_FILE) in the environment.",
                id="sparkops.E001",
            )
        ]
    return []


@register()
def poll_interval_check(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> Sequence[CheckMessage]:  # noqa: ARG001 (a system check's signature)
    if settings.SPARKOPS_LIVENESS_INTERVAL > settings.SPARKOPS_POLL_INTERVAL:
        return [
            Warning(
                "SPARKOPS_LIVENESS_INTERVAL is longer than SPARKOPS_POLL_INTERVAL; "
                "liveness probes are meant to be the cheaper, more frequent check.",
                id="sparkops.W001",
            )
        ]
    return []
