from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.urls import include, path

urlpatterns = [
    path("login/", login_not_required(auth_views.LoginView.as_view()), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("alerts/", include("dashboard.alerts.urls")),
    path("changelog/", include("dashboard.changelog.urls")),
    path("bench/", include("dashboard.benchmarks.urls")),
    path("probes/", include("dashboard.probes.urls")),
    path("experiments/", include("dashboard.experiments.urls")),
    path("planner/", include("dashboard.planner.urls")),
    path("api/", include("dashboard.api_urls")),
    path("", include("dashboard.urls")),
]

# A database that refuses (disk full, read-only, gone) answers 503 with its reason, not a bare 500.
handler500 = "dashboard.views.errors.server_error"
