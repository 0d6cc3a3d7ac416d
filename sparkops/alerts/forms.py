from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any, TypedDict, cast

from django import forms
from django.http import QueryDict
from django.utils import timezone

from dashboard.models import Engine, Host

from .custom_model import CustomRule
from .models import RENOTIFY_MAX_S, RENOTIFY_MIN_S, NotificationChannel, config_problems
from .rule_config import RuleLike, rule_settings
from .severity import Severity


class ChannelForm(forms.Form):
    name = forms.CharField(max_length=63, help_text="Letters, digits, '-' and '_', e.g. ops-hook")
    kind = forms.ChoiceField(choices=NotificationChannel.Kind.choices)
    address = forms.CharField(
        required=False,
        max_length=254,
        label="Email address",
        widget=forms.EmailInput(attrs={"data-kinds": "email"}),
        help_text="Email: who receives the alerts",
    )
    url = forms.CharField(
        required=False,
        max_length=2000,
        label="URL",
        widget=forms.TextInput(attrs={"data-kinds": "webhook apprise", "size": 50}),
        help_text="Webhook: the http(s) URL that receives a JSON POST per notice; "
        "Apprise: an Apprise URL such as ntfy://… or tgram://…",
    )
    secret = forms.CharField(
        required=False,
        max_length=200,
        label="Secret",
        widget=forms.PasswordInput(attrs={"data-kinds": "webhook"}, render_value=True),
        help_text="Webhook: signs each body (X-SparkOps-Signature: HMAC-SHA256); blank: unsigned",
    )
    format = forms.ChoiceField(
        required=False,
        choices=[("sparkops", "SparkOps JSON"), ("alertmanager", "Alertmanager JSON")],
        widget=forms.Select(attrs={"data-kinds": "webhook"}),
        help_text="Webhook: the body's shape",
    )

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        NotificationChannel._meta.get_field("name").run_validators(name)
        if NotificationChannel.objects.filter(name=name).exists():
            raise forms.ValidationError(f"a channel named {name!r} already exists")
        return name

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        for field, problem in config_problems(data.get("kind"), data).items():
            self.add_error(field, problem)
        return data

    def config(self) -> dict[str, str]:
        data = self.cleaned_data
        if data["kind"] == "email":
            return {"address": data["address"]}
        if data["kind"] == "apprise":
            return {"url": data["url"].strip()}
        return {"url": data["url"], "format": data.get("format") or "sparkops"}


# What the admin's raw JSON holds per kind (the Channels page has a form per kind instead).
CONFIG_HINT = (
    'email: {"address": "ops@example.com"} · webhook: {"url": "https://hooks.example/sparkops", '
    '"format": "sparkops" or "alertmanager"} · apprise: {"url": "ntfy://topic"}. '
    "Easier: Alerts → Channels, a form per kind with Send test."
)


class RuleChanges(TypedDict):
    """What RuleForm changes: services.rule_update's keywords."""

    enabled: bool
    severity: str | None
    params: dict[str, float]
    renotify_s: int | None


class Scope(TypedDict, total=False):
    """What a maintenance window covers: one engine, one host, or (empty) everything."""

    engine: Engine
    host: Host


class MaintenanceChanges(Scope):
    """MaintenanceForm's window: services.maintenance_create's keywords."""

    starts_at: datetime
    ends_at: datetime
    reason: str


class SilenceForm(forms.Form):
    hours = forms.FloatField(min_value=0.05, max_value=24 * 90, initial=2, help_text="How long, in hours")
    reason = forms.CharField(required=False, max_length=500)


class RuleForm(forms.Form):
    """One field per setting in the rule's DEFAULTS, plus enabled/severity/re-notify."""

    enabled = forms.BooleanField(required=False)
    severity = forms.ChoiceField(
        choices=[("", "default"), ("info", "info"), ("warning", "warning"), ("critical", "critical")], required=False
    )
    renotify_s = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=RENOTIFY_MAX_S,
        label="Re-notify every (s)",
        help_text="0 or blank: the default; otherwise 60 s to 7 days",
    )

    def __init__(self, *args: Any, rule: RuleLike, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

        self.rule = rule
        current = rule_settings(rule)
        self.fields["enabled"].initial = current.enabled
        self.fields["severity"].initial = current.severity
        from .rules.base import param_bounds

        for name, default in rule.DEFAULTS.items():
            self.fields[f"p_{name}"] = forms.FloatField(
                label=name, **param_bounds(name).field_kwargs(), initial=current.params.get(name, default)
            )

    def clean_renotify_s(self) -> int | None:
        value = self.cleaned_data.get("renotify_s")
        if value and value < RENOTIFY_MIN_S:
            raise forms.ValidationError(
                f"Re-notify at most once a minute: {RENOTIFY_MIN_S} s or more (0: the default)."
            )
        return value

    def update_kwargs(self) -> "RuleChanges":
        data = self.cleaned_data
        params = {name: data[f"p_{name}"] for name in self.rule.DEFAULTS if data.get(f"p_{name}") is not None}
        return {
            "enabled": data["enabled"],
            "severity": data["severity"] or None,
            "params": params,
            "renotify_s": data.get("renotify_s"),
        }


SCOPE_EVERYTHING = "all"
MAINTENANCE_MAX = timedelta(days=90)
# A form filled in slowly still means "starting now"; anything older is a typo, not a plan.
START_GRACE = timedelta(minutes=10)


def scope_choices() -> list[tuple[str, str]]:
    """'all', 'host:<pk>', 'engine:<pk>' — one select instead of two fields that could both be set."""

    hosts = [(f"host:{h.pk}", f"host {h.name} (all its engines)") for h in Host.objects.order_by("name")]
    engines = [(f"engine:{e.pk}", f"engine {e.name}") for e in Engine.objects.order_by("name")]
    return [(SCOPE_EVERYTHING, "everything"), *hosts, *engines]


class MaintenanceForm(forms.Form):
    scope = forms.ChoiceField(help_text="What the window covers")
    starts_at = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}), help_text="Blank: now"
    )
    ends_at = forms.DateTimeField(widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    reason = forms.CharField(
        max_length=500,
        widget=forms.TextInput(attrs={"size": 50}),
        help_text="Shown to whoever wonders why nobody was paged",
    )

    def __init__(self, *args: Any, now: datetime | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.now = now or timezone.now()
        cast(forms.ChoiceField, self.fields["scope"]).choices = scope_choices()

    def clean_scope(self) -> "Scope":
        value = self.cleaned_data["scope"]
        if value == SCOPE_EVERYTHING:
            return {}
        kind, pk = value.split(":")
        try:
            if kind == "engine":
                return {"engine": Engine.objects.get(pk=pk)}
            return {"host": Host.objects.get(pk=pk)}
        except (Engine.DoesNotExist, Host.DoesNotExist):
            raise forms.ValidationError(f"that {kind} no longer exists") from None

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        start, end = data.get("starts_at") or self.now, data.get("ends_at")
        data["starts_at"] = start
        if start < self.now - START_GRACE:
            self.add_error("starts_at", "The start is in the past; leave it blank to start now.")
        if end is None:
            return data
        if end <= self.now:
            self.add_error("ends_at", "The end is in the past; a window must end in the future.")
        elif end <= start:
            self.add_error("ends_at", "The end must be after the start.")
        elif end - start > MAINTENANCE_MAX:
            self.add_error("ends_at", f"A window may last at most {MAINTENANCE_MAX.days} days.")
        return data

    def create_kwargs(self) -> "MaintenanceChanges":
        data = self.cleaned_data
        return {"starts_at": data["starts_at"], "ends_at": data["ends_at"], "reason": data["reason"], **data["scope"]}


class RouteForm(forms.Form):
    """One Route row: a rule (blank: every rule) and the minimum severity the channel receives."""

    rule = forms.ChoiceField(required=False)
    min_severity = forms.ChoiceField(choices=Severity.choices, initial=Severity.INFO)

    def __init__(self, *args: Any, rules: Iterable[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["rule"]).choices = [("", "every rule"), *((r, r) for r in rules)]


class BaseRouteFormSet(forms.BaseFormSet):
    def clean(self) -> None:
        if any(self.errors):
            return
        seen: set[str] = set()
        for form in self._kept():
            rule = form.cleaned_data.get("rule", "")
            if rule in seen:
                raise forms.ValidationError(f"{rule or 'every rule'} appears twice; keep one row per rule.")
            seen.add(rule)

    def _kept(self) -> Iterator[forms.Form]:
        # Existing routes stay unless ticked for deletion; the blank extra row counts only once filled in.
        for i, form in enumerate(self.forms):
            counts = i < self.initial_form_count() or form.has_changed()
            # _should_delete_form is BaseFormSet's own (its deleted_forms reads it); the stubs
            # leave Django's private methods out.
            if counts and not self._should_delete_form(form):  # type: ignore[attr-defined]
                yield form

    def routes(self) -> list[tuple[str, str]]:
        """The (rule, min_severity) pairs the channel should have after this submit."""
        return [(f.cleaned_data["rule"], f.cleaned_data["min_severity"]) for f in self._kept()]


RouteFormSet = forms.formset_factory(RouteForm, formset=BaseRouteFormSet, extra=1, can_delete=True)


def route_formset(
    channel: NotificationChannel, *, rules: Iterable[str], data: QueryDict | None = None
) -> BaseRouteFormSet:
    """The routing form of CHANNEL; prefixed by its id so every channel's form can share one page."""
    initial = [{"rule": r.rule, "min_severity": r.min_severity} for r in channel.routes.all()]
    rules = sorted(set(rules) | {i["rule"] for i in initial if i["rule"]})
    formset = RouteFormSet(data, initial=initial, prefix=f"routes-{channel.pk}", form_kwargs={"rules": rules})
    return cast(BaseRouteFormSet, formset)  # formset_factory's class is a BaseRouteFormSet; its stub says BaseFormSet


class CustomRuleForm(forms.Form):
    """The page's form; its fields are the definition custom_rule_clean checks (the one validation)."""

    name = forms.CharField(max_length=80, help_text="letters, digits, '.', '_', '-'; the key is custom.NAME")
    scope = forms.ChoiceField(choices=CustomRule.Scope.choices)
    engine = forms.CharField(required=False, help_text="engine name; blank: every engine")
    host = forms.CharField(required=False, help_text="host name (host metrics); blank: every host")
    metric = forms.CharField(max_length=80, help_text="a stored series, e.g. kv_cache_usage, gpu0.temperature_c")
    comparator = forms.ChoiceField(choices=CustomRule.Comparator.choices)
    threshold = forms.CharField(max_length=40, help_text="e.g. 0.95 (kv_cache_usage is 0–1)")
    for_ = forms.CharField(label="For", initial="0", max_length=20, help_text="how long it must hold: 300, 5m, 1h")
    severity = forms.ChoiceField(choices=Severity.choices, initial=Severity.WARNING)
    channels = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, help_text="channels without routes receive it anyway"
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = NotificationChannel.objects.values_list("name", flat=True)
        self.fields["channels"].choices = [(n, n) for n in names]  # type: ignore[attr-defined]

    def definition(self) -> dict:
        data = dict(self.cleaned_data)
        data["for"] = data.pop("for_")
        return data
