"""The rules page, drawn by the views that change a rule (alerts/views.py: the built-in rules'
settings; alerts/custom_views.py: the operator's own) with the form they were sent, errors and all."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from .custom_model import CustomRule
from .custom_services import custom_rule_export
from .forms import CustomRuleForm, RuleForm
from .rule_config import rule_settings
from .rules import REGISTRY


def custom_rules_context(*, form: CustomRuleForm | None = None) -> dict:
    """What the rules page draws of the custom rules (FORM: as submitted, with its errors)."""
    rules = []
    for rule in CustomRule.objects.select_related("engine", "host"):
        shown = custom_rule_export(rule)
        shown["where"] = shown["engine"] or shown["host"] or f"every {rule.scope}"
        rules.append((rule, shown))
    return {"custom_rules": rules, "custom_form": form or CustomRuleForm()}


def rules_page(
    request: HttpRequest, *, bound: RuleForm | None = None, status: int = 200, custom_form: CustomRuleForm | None = None
) -> HttpResponse:
    """The rules page; BOUND: a rule's form as submitted, drawn with its errors at the fields and its input kept
    (CUSTOM_FORM: the custom rule form as submitted, alerts/custom_views.py)."""

    rows = [
        {
            "rule": r,
            "settings": rule_settings(r),
            "form": bound if bound is not None and bound.rule.key == r.key else RuleForm(rule=r),
        }
        for r in REGISTRY.values()
    ]
    return render(
        request,
        "alerts/rules.html",
        {"rows": rows, "bound_key": bound.rule.key if bound else "", **custom_rules_context(form=custom_form)},
        status=status,
    )
