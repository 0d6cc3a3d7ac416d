"""The user's own page: their read-only API tokens, created (shown once) and revoked here or
with `sparkops token`. Any signed-in user may hold tokens: a token reads only what its user reads."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from dashboard.roles import SignedInRequest
from dashboard.tokens.models import ApiToken


@require_http_methods(["GET", "POST"])
def tokens(request: SignedInRequest) -> HttpResponse:
    shown, error = None, ""
    if request.method == "POST":
        name = request.POST.get("name", "").strip()
        try:
            _row, shown = ApiToken.issue(request.user, name=name)
        except ValidationError as exc:
            error = f"{' '.join(exc.messages)} No token was created."
    rows = ApiToken.objects.filter(user=request.user).order_by("-created_at")
    return render(
        request, "account/tokens.html", {"tokens": rows, "shown": shown, "error": error}, status=400 if error else 200
    )


@require_POST
def token_revoke(request: SignedInRequest, pk: int) -> HttpResponse:
    row = ApiToken.objects.filter(pk=pk, user=request.user).first()
    if row is None:  # someone else's token, or none: the same answer
        raise Http404("no such token of yours")
    if not row.is_revoked:
        row.revoke()
        messages.success(request, f"Token {row.prefix}… revoked.")
    return redirect("account-tokens")
