"""Live "alert.changed" events for the live view (sent after commit)."""

from django.template.loader import render_to_string

from dashboard.live.events import GROUP_ALL, LiveEvent, publish_on_commit


def alert_changed(event):
    # The pushed row is the same for every browser: forms carry an empty csrf input that the
    # live client fills from its cookie; the server still checks the role on POST.
    html = render_to_string("alerts/_alert_row.html", {"a": event, "can_operate": True, "pushed": True})
    payload = {
        "id": event.pk,
        "rule": event.rule,
        "severity": event.severity,
        "state": event.state,
        "subject": event.subject,
        "message": event.message,
        "cause": event.cause,
        "acknowledged": bool(event.acknowledged_at),
        "html": html,
    }
    publish_on_commit(GROUP_ALL, LiveEvent(type="alert.changed", payload=payload))
