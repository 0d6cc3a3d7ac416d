"""Rate mode from the browser: the form queues a rate run on the engine's box; its run page shows goodput."""

from django import forms
from django.contrib import messages
from django.db import transaction
from django.shortcuts import redirect, render

from dashboard.forms.ids import IdChoiceField
from dashboard.models import Engine
from dashboard.roles import role_required
from sparkops.poller.fleet import BoxUnreachable, require_reachable

from .models import MAX_DEPTH, MAX_OUTPUT
from .rate import ARRIVALS, MAX_DURATION_S, MAX_RATE, RateError, rate_create
from .spec import RunSpec
from .tasks import bench_rate_execute


class RateForm(forms.Form):
    engine = IdChoiceField(queryset=Engine.objects.filter(retired_at__isnull=True).order_by("name"))
    rate = forms.FloatField(min_value=0.01, max_value=MAX_RATE, initial=2.0, help_text="Requests per second")
    duration_s = forms.FloatField(min_value=0.1, max_value=MAX_DURATION_S, initial=60, label="Duration (s)")
    arrival = forms.ChoiceField(choices=[(a, a) for a in ARRIVALS], initial="poisson")
    seed = forms.IntegerField(initial=0, help_text="Poisson arrivals: the same seed sends at the same times")
    slo_ttft_ms = forms.FloatField(min_value=0.001, initial=2000, label="TTFT SLO (ms)")
    slo_tpot_ms = forms.FloatField(min_value=0.001, initial=100, label="Time per output token SLO (ms)")
    depth = forms.IntegerField(min_value=0, max_value=MAX_DEPTH, initial=0, help_text="Prompt tokens")
    output_tokens = forms.IntegerField(min_value=2, max_value=MAX_OUTPUT, initial=256, help_text="Pinned")
    force = forms.BooleanField(required=False, help_text="Allow depth > 0 (arriving requests overlap)")


@role_required("operator")
def rate_new(request):
    form = RateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        engine = d["engine"]
        spec = RunSpec(
            engine_name=engine.name,
            engine_kind=engine.kind,
            base_url=engine.base_url,
            depth=d["depth"],
            output_tokens=d["output_tokens"],
            force=d["force"],
        )
        try:
            with transaction.atomic():  # the input's errors first; a box that cannot take it keeps no row
                run = rate_create(
                    engine=engine,
                    spec=spec,
                    rate=d["rate"],
                    duration_s=d["duration_s"],
                    arrival=d["arrival"],
                    slo_ttft_ms=d["slo_ttft_ms"],
                    slo_tpot_ms=d["slo_tpot_ms"],
                    seed=d["seed"],
                    user=request.user,
                )
                require_reachable(engine.host)
        except (RateError, BoxUnreachable) as exc:
            form.add_error(None, str(exc))
        else:
            queue = engine.host.queue
            transaction.on_commit(lambda: bench_rate_execute.apply_async(args=[run.pk], queue=queue))
            messages.success(request, f"Rate run {run.pk} queued ({run.total_reps} requests).")
            return redirect("bench:run", pk=run.pk)
    return render(request, "bench/rate_form.html", {"form": form})
