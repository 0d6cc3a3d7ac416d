from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from dashboard.models import Engine
from dashboard.params import safe_next
from dashboard.roles import SignedInRequest, role_required
from dashboard.unit_actions import restart_request
from sparkops.live.cards import engine_card_context, error_history
from sparkops.live.ranges import PRESETS


@require_GET
def engine_list(request: HttpRequest) -> HttpResponse:
    return render(request, "dashboard/engine_list.html", {"engines": Engine.objects.select_related("host")})


@require_GET
def engine_detail(request: HttpRequest, name: str) -> HttpResponse:
    engine = get_object_or_404(Engine.objects.select_related("host"), name=name)
    others = Engine.objects.exclude(pk=engine.pk).filter(retired_at__isnull=True).values_list("name", flat=True)
    return render(
        request,
        "dashboard/engine_detail.html",
        {
            **engine_card_context(engine),
            "ranges": list(PRESETS),
            "others": list(others),
            "error_history": error_history(engine),
        },
    )


@require_POST
@role_required("admin")
def engine_restart(request: SignedInRequest, name: str) -> HttpResponse:
    """The down card's Restart button: queued on the engine's own box (dashboard.unit_actions)."""

    engine = get_object_or_404(Engine.objects.select_related("host"), name=name)
    if not engine.unit or request.POST.get("confirm") != engine.unit:
        messages.error(request, f"Not restarted: confirm the restart of {engine.unit or engine.name} first.")
    else:
        try:
            restart_request(engine=engine, user=request.user)
            messages.success(
                request,
                f"Restart of {engine.unit} sent to {engine.host.name}'s worker; "
                "its outcome will be on the alert's timeline and in the change log.",
            )
        except ValidationError as exc:
            messages.error(request, "Not restarted: " + "; ".join(exc.messages))
    target = safe_next(request)
    return HttpResponseRedirect(target) if target else redirect("engine-detail", name=engine.name)
