from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from dashboard.forms.audit import ThresholdsForm
from dashboard.models import Engine, Host
from dashboard.roles import SignedInRequest, request_has_role, require_request_role
from sparkops.audit.run import audit, audit_host
from sparkops.audit.thresholds import effective_thresholds, stored_overrides, thresholds, thresholds_save
from sparkops.launch.starts import box_cold_boot


@require_http_methods(["GET", "POST"])
def host_audit(request: SignedInRequest, name: str) -> HttpResponse:
    """Every playbook check over the box's engines, worst first; the box's thresholds, which
    admins edit here (POST: stored, or the form again with the error at the field)."""
    host = get_object_or_404(Host, name=name)
    stored = stored_overrides(host.pk)
    form = None
    status = 200
    if request.method == "POST":
        require_request_role(request, "admin")
        form = ThresholdsForm(request.POST, in_force=effective_thresholds(host.pk), stored=stored)
        if form.is_valid():
            changed = thresholds_save(host=host, values=form.values, user=request.user)
            messages.success(
                request, f"Saved {', '.join(changed)}." if changed else "No threshold changed: nothing saved."
            )
            return redirect("host-audit", name=host.name)
        status = 400
    elif request_has_role(request, "admin"):
        form = ThresholdsForm(in_force=effective_thresholds(host.pk), stored=stored)
    results = audit_host(host)

    return render(
        request,
        "dashboard/audit.html",
        {
            "host": host,
            "engine": None,
            "results": results,
            "failed": sum(r.status == "fail" for r in results),
            "cold_boot": box_cold_boot(host),
            "form": form,
            "thresholds": _threshold_rows(host, stored),
        },
        status=status,
    )


def _threshold_rows(host: Host, stored: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    in_force = effective_thresholds(host.pk)
    return [
        {
            "name": f"{key}.{field}",
            "value": in_force[key][field],
            "default": default,
            "stored": field in stored.get(key, {}),
        }
        for key, field, default, _ in thresholds()
    ]


@require_GET
def engine_audit(request: HttpRequest, name: str) -> HttpResponse:
    engine = get_object_or_404(Engine.objects.select_related("host"), name=name)
    engines = list(Engine.objects.filter(host=engine.host, retired_at__isnull=True).order_by("name"))
    results = audit(engines, only_engine=engine)
    return render(
        request,
        "dashboard/audit.html",
        {"host": engine.host, "engine": engine, "results": results, "failed": sum(r.status == "fail" for r in results)},
    )
