from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.apps import AppConfig
from django.db.models import ProtectedError
from django.db.models.signals import pre_delete

if TYPE_CHECKING:
    from dashboard.models import Engine


class ChangelogConfig(AppConfig):
    name = "sparkops.changelog"
    label = "changelog"
    verbose_name = "Change log"

    def ready(self) -> None:
        pre_delete.connect(_engine_named_in_the_log, sender="dashboard.Engine", dispatch_uid="changelog-engine-protect")


def _engine_named_in_the_log(sender: type[Engine] | str, instance: Engine, **kwargs: Any) -> None:  # noqa: ARG001 (a signal receiver's signature)
    """Entry.engines is a many-to-many, whose link rows Django would cascade away: an engine
    an entry names is as protected as one a claim points at (retire it instead)."""

    entries = list(instance.changelog_entries.all()[:5])
    if entries:
        raise ProtectedError(
            f"Cannot delete engine {instance.name!r}: change-log entries name it "
            f"(retire it with 'sparkops engine remove {instance.name}').",
            set(entries),
        )
