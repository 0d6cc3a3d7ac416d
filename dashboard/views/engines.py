from django.shortcuts import get_object_or_404, render

from dashboard.models import Engine


def engine_list(request):
    return render(request, "dashboard/engine_list.html", {"engines": Engine.objects.select_related("host")})


def engine_detail(request, name):
    engine = get_object_or_404(Engine.objects.select_related("host"), name=name)
    return render(request, "dashboard/engine_detail.html", {"engine": engine})
