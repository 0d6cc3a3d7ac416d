"""Probe pages: every measured kind's (sparkops/measured/views.py), declared here with what a probe's
show beyond them: a needle profile's table, and the depths of its cases."""

from sparkops.measured.views import KindPages

from .forms import ProbeProfileForm
from .kind import PROBE
from .selectors import needle_table, profile_trend

PAGES = KindPages(
    kind=PROBE,
    form=ProbeProfileForm,
    trend=profile_trend,
    profile_extra=lambda profile: {
        "table": needle_table(profile=profile) if profile.kind == "needle" else [],
        "depths": profile.spec().depths,
    },
    run_extra=lambda run: {
        "cases": run.cases.all(),
        "depths": (run.result or {}).get("depths") or (run.config.get("params") or {}).get("depths") or [],
    },
)
