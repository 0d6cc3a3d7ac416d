"""The live overview: engine, host and GPU cards plus the firing alerts, all pushed over the WebSocket."""

from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.alerts.selectors import firing_alerts
from dashboard.controls.launch import guarded_launches
from dashboard.live.cards import engine_card_context, host_card_context, worst_alerts
from dashboard.models import Engine, Host


def firing_alerts_context():
    """What templates/alerts/_firing.html reads."""
    return {"firing": list(firing_alerts())}


@require_GET
def overview(request):
    engines = list(Engine.objects.select_related("host").filter(retired_at__isnull=True))  # retired: off the live view
    alerts, launches = worst_alerts(engines), guarded_launches(engines)
    engines = [engine_card_context(e, alerts=alerts, launches=launches) for e in engines]
    hosts = [host_card_context(h) for h in Host.objects.all()]
    return render(
        request,
        "dashboard/overview.html",
        {"engine_cards": engines, "host_cards": hosts, **firing_alerts_context()},
    )


@require_GET
def firing_alerts_partial(request):
    """The alert list re-rendered for the requesting user's role, fetched when "alert.changed" arrives
    (so a viewer's page never receives Ack/Silence buttons, whatever the event carried)."""
    return render(request, "dashboard/partials/_alerts.html", firing_alerts_context())
