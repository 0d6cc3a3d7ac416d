from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from dashboard.models import Engine, Host
from dashboard.services import audit


@require_GET
def host_audit(request, name):
    """Every playbook check over the box's engines, worst first."""
    host = get_object_or_404(Host, name=name)
    results = audit.audit_host(host)
    from dashboard.services.launchconfig import box_cold_boot

    return render(
        request,
        "dashboard/audit.html",
        {
            "host": host,
            "engine": None,
            "results": results,
            "failed": sum(r.status == "fail" for r in results),
            "cold_boot": box_cold_boot(host),
        },
    )


@require_GET
def engine_audit(request, name):
    engine = get_object_or_404(Engine.objects.select_related("host"), name=name)
    engines = list(Engine.objects.filter(host=engine.host, retired_at__isnull=True).order_by("name"))
    results = audit.audit(engines, only_engine=engine)
    return render(
        request,
        "dashboard/audit.html",
        {"host": engine.host, "engine": engine, "results": results, "failed": sum(r.status == "fail" for r in results)},
    )
