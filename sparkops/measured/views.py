"""Every measured kind's pages, written once: its index (profiles and recent runs), a profile's
form, page (trend, runs, cron) and run button, and a run's page (live progress). A kind declares
its `KindPages` (its form, its trend and what else each page shows) and includes `urls()` in its
own urls.py, under its namespace; its templates live in "<namespace>/".

The URL names are the same for every kind: index, profile-new, profile, profile-edit, profile-run, run."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import URLPattern, path
from django.views.decorators.http import require_POST

from dashboard.roles import role_required
from sparkops.poller.fleet import BoxUnreachable

from .forms import MeasuredProfileForm
from .kinds import Kind
from .services import profile_cron, profile_save, schedule_initial

RECENT = 30  # runs on a kind's index
PROFILE_RUNS = 50  # runs on a profile's page

Context = dict[str, Any]


def _nothing(*_: Any) -> Context:
    return {}


@dataclass(frozen=True)
class KindPages:
    """What a kind's pages show beyond every kind's: FORM its profile form, TREND(profile=) its trend's
    series; INDEX() more for its index, PROFILE(profile) more for a profile's page, RUN(run) more for a
    run's page."""

    kind: Kind
    form: type[MeasuredProfileForm]
    trend: Callable[..., Any]
    index_extra: Callable[[], Context] = field(default=_nothing)
    profile_extra: Callable[[Any], Context] = field(default=_nothing)
    run_extra: Callable[[Any], Context] = field(default=_nothing)

    def _template(self, name: str) -> str:
        return f"{self.kind.namespace}/{name}.html"

    def _to(self, name: str, pk: int) -> HttpResponse:
        return redirect(f"{self.kind.namespace}:{name}", pk=pk)

    def index(self, request: HttpRequest) -> HttpResponse:
        profiles = self.kind.profile_model.objects.select_related("engine", "schedule", "schedule__crontab")
        runs = self.kind.run_model.objects.select_related("engine", "profile")[:RECENT]
        return render(request, self._template("index"), {"profiles": profiles, "runs": runs, **self.index_extra()})

    def profile_create(self, request: HttpRequest) -> HttpResponse:
        return self._profile_form(request, None)

    def profile_edit(self, request: HttpRequest, pk: int) -> HttpResponse:
        return self._profile_form(request, get_object_or_404(self.kind.profile_model, pk=pk))

    def _profile_form(self, request: HttpRequest, profile: Any) -> HttpResponse:
        initial: Context = {} if profile is None else dict(schedule_initial(profile))
        form = self.form(request.POST or None, instance=profile, **initial)
        if request.method == "POST" and form.is_valid():
            assert request.user.is_authenticated  # role_required let only a signed-in operator here
            saved = profile_save(form=form, user=request.user, set_schedule=self.kind.set_schedule)
            messages.success(request, f"{self.kind.noun} {saved.name} saved.")
            return self._to("profile", saved.pk)
        context = {"form": form} if profile is None else {"form": form, "profile": profile}
        return render(request, self._template("profile_form"), context)

    def profile_detail(self, request: HttpRequest, pk: int) -> HttpResponse:
        profile = get_object_or_404(
            self.kind.profile_model.objects.select_related("engine", "schedule__crontab"), pk=pk
        )
        context = {
            "profile": profile,
            "runs": profile.runs.select_related("engine", "profile")[:PROFILE_RUNS],
            "trend": self.trend(profile=profile),
            "cron": profile_cron(profile),
            **self.profile_extra(profile),
        }
        return render(request, self._template("profile_detail"), context)

    def profile_run(self, request: HttpRequest, pk: int) -> HttpResponse:
        profile = get_object_or_404(self.kind.profile_model.objects.select_related("engine__host"), pk=pk)
        try:
            run = self.kind.enqueue(profile=profile, user=request.user)
        except BoxUnreachable as exc:
            messages.error(request, f"Not run: {exc}")
            return self._to("profile", profile.pk)
        messages.success(request, f"{self.kind.run_noun} {run.pk} queued.")
        return self._to("run", run.pk)

    def run_detail(self, request: HttpRequest, pk: int) -> HttpResponseBase:
        model = self.kind.run_model
        run = get_object_or_404(model.objects.select_related("engine", "profile", "created_by"), pk=pk)
        if request.GET.get("format") == "progress":  # run.js catches up with this when its socket (re)opens
            return JsonResponse(run.progress_payload())
        live = run.status in (model.Status.QUEUED, model.Status.RUNNING)
        return render(request, self._template("run_detail"), {"run": run, "live": live, **self.run_extra(run)})

    def urls(self) -> list[URLPattern]:
        """The pages' URL patterns, for the kind's urls.py (whose app_name is the kind's namespace)."""
        operator = role_required("operator")
        return [
            path("", self.index, name="index"),
            path("profiles/new/", operator(self.profile_create), name="profile-new"),
            path("profiles/<id:pk>/", self.profile_detail, name="profile"),
            path("profiles/<id:pk>/edit/", operator(self.profile_edit), name="profile-edit"),
            path("profiles/<id:pk>/run/", operator(require_POST(self.profile_run)), name="profile-run"),
            path("runs/<id:pk>/", self.run_detail, name="run"),
        ]
