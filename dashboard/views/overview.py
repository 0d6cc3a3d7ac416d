from django.shortcuts import render

from dashboard.models import Engine, Host


def overview(request):
    engines = Engine.objects.select_related("host")
    return render(request, "dashboard/overview.html", {"engines": engines, "hosts": Host.objects.all()})
