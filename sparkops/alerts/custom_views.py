"""The operator's own rules on the web: a section of the rules page (list, add, remove) and the
JSON API (`/api/rules/custom/`: GET lists them, as the configuration export writes them; POST
adds one; DELETE `/api/rules/custom/NAME/` removes one). Writes need an admin's session (API
tokens are read-only, dashboard/tokens/middleware.py)."""

import json

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods, require_POST

from dashboard.roles import role_required

from .custom_services import (
    custom_rule_create,
    custom_rule_enable,
    custom_rule_export,
    custom_rule_reasons,
    custom_rule_remove,
    custom_rules_export,
)
from .forms import CustomRuleForm
from .rules_page import rules_page


@require_POST
@role_required("admin")
def custom_rule_new(request: HttpRequest) -> HttpResponse:
    form = CustomRuleForm(request.POST)
    if form.is_valid():
        try:
            rule = custom_rule_create(data=form.definition())
        except ValidationError as exc:
            for field, reasons in exc.message_dict.items():
                form.add_error("for_" if field == "for" else field if field in form.fields else None, reasons)
        else:
            messages.success(request, f"Rule {rule.key} added: {rule.metric} {rule.comparator} {rule.threshold:g}.")
            return redirect("alerts:rules")
    messages.error(request, "Custom rule not added: see the marked fields below.")
    return rules_page(request, custom_form=form, status=400)


@require_POST
@role_required("admin")
def custom_rule_delete(request: HttpRequest, name: str) -> HttpResponse:
    try:
        rule = custom_rule_remove(name=name)
    except ValidationError as exc:
        messages.error(request, custom_rule_reasons(exc))
    else:
        messages.success(request, f"Rule {rule.key} removed; what it had open is resolved.")
    return redirect("alerts:rules")


@require_POST
@role_required("admin")
def custom_rule_switch(request: HttpRequest, name: str) -> HttpResponse:
    """The page's Enable/Disable button."""
    enabled = request.POST.get("enabled") == "1"
    try:
        rule = custom_rule_enable(name=name, enabled=enabled)
    except ValidationError as exc:
        messages.error(request, custom_rule_reasons(exc))
    else:
        messages.success(request, f"Rule {rule.key} {'enabled' if enabled else 'disabled'}.")
    return redirect("alerts:rules")


@require_http_methods(["GET", "POST"])
def api_custom_rules(request: HttpRequest) -> HttpResponse:
    """GET: {"custom_rules": [definition, …]}; POST a definition (JSON): 201 with it, or 400 with the reasons."""
    if request.method == "GET":
        return JsonResponse({"custom_rules": custom_rules_export()})
    return _api_create(request)


@role_required("admin")
def _api_create(request: HttpRequest) -> HttpResponse:
    if request.content_type != "application/json":  # a form post's body is the form's, not a rule
        return JsonResponse(
            {
                "error": f"send the rule as JSON (Content-Type: application/json), not {request.content_type or 'nothing'}"
            },
            status=415,
        )
    try:
        data = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        return JsonResponse({"error": f"the body is not JSON: {exc}"}, status=400)
    if not isinstance(data, dict):
        return JsonResponse({"error": "the body is one rule definition, a JSON object"}, status=400)
    try:
        rule = custom_rule_create(data=data)
    except ValidationError as exc:
        errors = exc.message_dict if hasattr(exc, "error_dict") else {"": exc.messages}
        return JsonResponse({"error": custom_rule_reasons(exc), "fields": errors}, status=400)
    return JsonResponse(custom_rule_export(rule), status=201)


@role_required("admin")
@require_http_methods(["DELETE"])
def api_custom_rule(request: HttpRequest, name: str) -> HttpResponse:  # noqa: ARG001 (a view's signature)
    try:
        custom_rule_remove(name=name)
    except ValidationError as exc:
        return JsonResponse({"error": custom_rule_reasons(exc)}, status=404)
    return JsonResponse({"removed": name})
