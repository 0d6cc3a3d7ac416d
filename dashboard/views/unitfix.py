"""The launch audit's fixes on the page: each drop-in previewed as a diff; an admin applies them through
the box's own worker (sparkops.controls.unitfix_tasks), behind the box's SPARKOPS_UNIT_ACTIONS switch."""

import re
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from dashboard.models import Engine
from dashboard.roles import SignedInRequest, request_has_role, require_request_role
from sparkops.changelog.models import Entry
from sparkops.controls import unitfix
from sparkops.controls.unitfix_tasks import TITLE, fix_request

ENTRY_LINK = re.compile(r"\[entry (\d+)\]")


def recent_fixes(engine: Engine, limit: int = 10) -> list[dict[str, Any]]:
    """The engine's unit-fix notes, newest first, each with the observed entry its outcome names."""

    rows = Entry.objects.filter(engines=engine, kind="incident_note", title__startswith=TITLE).order_by(
        "-effective_at", "-pk"
    )[:limit]
    return [{"entry": e, "observed": (ENTRY_LINK.search(e.body_md) or [None, None])[1]} for e in rows]


@require_http_methods(["GET", "POST"])
def engine_unit_fix(request: SignedInRequest, name: str) -> HttpResponse:
    engine = get_object_or_404(Engine.objects.select_related("host"), name=name)
    if request.method == "POST":
        require_request_role(request, "admin")
        try:
            fix_request(engine=engine, checks=request.POST.getlist("check"), user=request.user)
            messages.success(
                request,
                f"Sent to {engine.host.name}'s worker: it writes the drop-ins, reloads systemd and observes "
                f"{engine.unit}; the outcome and the change it logs appear below.",
            )
        except ValidationError as exc:
            messages.error(request, "Not applied: " + "; ".join(exc.messages))
        return redirect("engine-unit-fix", name=engine.name)
    plan = unitfix.plan(engine, live=False)
    return render(
        request,
        "dashboard/unit_fix.html",
        {
            "engine": engine,
            "host": engine.host,
            "plan": plan,
            "is_admin": request_has_role(request, "admin"),
            "allowed": bool(engine.host_id and engine.host.unit_actions),
            "recent": recent_fixes(engine),
        },
    )
