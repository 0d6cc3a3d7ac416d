from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.urls import include, path

from dashboard.views.docs import docs_page

urlpatterns = [
    path("login/", login_not_required(auth_views.LoginView.as_view()), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("alerts/", include("sparkops.alerts.urls")),
    path("changelog/", include("sparkops.changelog.urls")),
    path("bench/", include("sparkops.benchmarks.urls")),
    path("probes/", include("sparkops.probes.urls")),
    path("experiments/", include("sparkops.experiments.urls")),
    path("planner/", include("sparkops.planner.urls")),
    path("api/", include("dashboard.api_urls")),
    # The manual (`make docs` builds it): served here so a box without internet still has it.
    path("docs/", docs_page, name="docs"),
    path("docs/<path:path>", docs_page, name="docs-page"),
    path("", include("dashboard.urls")),
]

# A database that refuses (disk full, read-only, gone) answers 503 with its reason, not a bare 500.
handler500 = "dashboard.views.errors.server_error"
