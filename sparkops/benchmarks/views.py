"""Benchmark pages: compare, pairs; a profile's and a run's pages are every measured kind's
(sparkops/measured/views.py), declared here with what a benchmark's show beyond them."""

from django.contrib import messages
from django.db import transaction
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from dashboard.params import ParamError, int_param
from dashboard.roles import role_required
from sparkops.measured.views import KindPages
from sparkops.poller.fleet import BoxUnreachable, require_reachable

from .forms import PairForm, ProfileForm
from .kind import BENCH
from .models import PairRun, Sweep
from .pair import pair_create
from .selectors import profile_trend, runs_for_compare
from .services import run_summary
from .tasks import bench_pair_execute

PAGES = KindPages(
    kind=BENCH,
    form=ProfileForm,
    trend=profile_trend,
    index_extra=lambda: {
        "pairs": PairRun.objects.select_related("profile_a", "profile_b")[:10],
        "pair_form": PairForm(),
        "sweeps": Sweep.objects.select_related("engine")[:10],
    },
    run_extra=lambda run: {"reps": run.repetitions.all(), "summary": run_summary(run)},
)


def compare(request):
    if not request.GET.get("a") and not request.GET.get("b"):
        return render(request, "bench/compare.html", {"error": "Pick two runs to compare (?a=RUN&b=RUN)."})
    try:
        a, b = (int_param(request.GET, key, required=True) for key in ("a", "b"))
    except ParamError as exc:
        return render(
            request, "bench/compare.html", {"error": f"Pick two runs to compare (?a=RUN&b=RUN): {exc}"}, status=400
        )
    run_a, run_b = runs_for_compare(a=a, b=b)
    if run_a is None or run_b is None:
        raise Http404("no such run")
    rows = _compare_rows(run_summary(run_a), run_summary(run_b))
    same = run_a.params_hash == run_b.params_hash
    return render(request, "bench/compare.html", {"a": run_a, "b": run_b, "rows": rows, "same_hash": same})


def _compare_rows(sa, sb):
    rows = []
    for name in (
        "ttft_ms",
        "first_answer_ms",
        "decode_tokens_per_s",
        "prompt_tokens",
        "cached_tokens",
        "completion_tokens",
        "reasoning_tokens",
        "chunks",
    ):
        ma, mb = sa[name].get("median"), sb[name].get("median")
        change = None if ma in (None, 0) or mb is None else 100.0 * (mb - ma) / ma
        rows.append({"name": name, "a": sa[name], "b": sb[name], "change": change})
    return rows


@role_required("operator")
@require_POST
def pair_start(request):
    form = PairForm(request.POST)
    if not form.is_valid():
        messages.error(request, "; ".join(str(e) for errs in form.errors.values() for e in errs))
        return redirect("bench:index")
    try:
        require_reachable(form.cleaned_data["profile_a"].engine.host)
    except BoxUnreachable as exc:
        messages.error(request, f"Not run: {exc}")
        return redirect("bench:index")
    pair = pair_create(
        profile_a=form.cleaned_data["profile_a"], profile_b=form.cleaned_data["profile_b"], user=request.user
    )

    queue = pair.profile_a.engine.host.queue  # both engines of a pair share one box
    transaction.on_commit(lambda: bench_pair_execute.apply_async(args=[pair.pk], queue=queue))
    return redirect("bench:pair", pk=pair.pk)


def pair_detail(request, pk):
    pair = get_object_or_404(PairRun.objects.select_related("profile_a__engine", "profile_b__engine"), pk=pk)
    return render(request, "bench/pair_detail.html", {"pair": pair, "runs": pair.runs.select_related("engine")})
