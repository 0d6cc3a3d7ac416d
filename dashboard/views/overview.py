"""The live overview: engine, host and GPU cards plus the firing alerts, all pushed over the WebSocket."""

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.models import Engine, Host
from dashboard.selectors.launches import guarded_launches
from sparkops.alerts.selectors import firing_alerts
from sparkops.live.cards import engine_card_context, host_card_context, worst_alerts


def firing_alerts_context() -> dict[str, Any]:
    """What templates/alerts/_firing.html reads."""
    return {"firing": list(firing_alerts())}


@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    engines = list(Engine.objects.select_related("host").filter(retired_at__isnull=True))  # retired: off the live view
    alerts, launches = worst_alerts(engines), guarded_launches(engines)
    cards = [engine_card_context(e, alerts=alerts, launches=launches) for e in engines]
    hosts = [host_card_context(h) for h in Host.objects.all()]
    return render(
        request,
        "dashboard/overview.html",
        {"engine_cards": cards, "host_cards": hosts, **firing_alerts_context()},
    )


@require_GET
def firing_alerts_partial(request: HttpRequest) -> HttpResponse:
    """The alert list re-rendered for the requesting user's role, fetched when "alert.changed" arrives
    (so a viewer's page never receives Ack/Silence buttons, whatever the event carried)."""
    return render(request, "dashboard/partials/_alerts.html", firing_alerts_context())
