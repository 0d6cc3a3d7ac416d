from django import forms
from django.core.validators import URLValidator, validate_email

from .models import NotificationChannel


class ChannelForm(forms.Form):
    name = forms.CharField(max_length=63)
    kind = forms.ChoiceField(choices=NotificationChannel.Kind.choices)
    address = forms.CharField(required=False, max_length=254)
    url = forms.CharField(required=False, max_length=500)
    secret = forms.CharField(required=False, max_length=200)
    format = forms.ChoiceField(required=False, choices=[("sparkops", "SparkOps JSON"), ("alertmanager", "Alertmanager JSON")])

    def clean_name(self):
        name = self.cleaned_data["name"]
        NotificationChannel._meta.get_field("name").run_validators(name)
        if NotificationChannel.objects.filter(name=name).exists():
            raise forms.ValidationError(f"a channel named {name!r} already exists")
        return name

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        if kind == "email":
            try:
                validate_email(data.get("address") or "")
            except forms.ValidationError:
                self.add_error("address", "An email channel needs a valid address.")
        elif kind == "webhook":
            try:
                URLValidator(schemes=["http", "https"])(data.get("url") or "")
            except forms.ValidationError:
                self.add_error("url", "A webhook channel needs an http:// or https:// URL.")
        return data

    def config(self):
        data = self.cleaned_data
        if data["kind"] == "email":
            return {"address": data["address"]}
        return {"url": data["url"], "format": data.get("format") or "sparkops"}


class SilenceForm(forms.Form):
    hours = forms.FloatField(min_value=0.05, max_value=24 * 90, initial=2, help_text="How long, in hours")
    reason = forms.CharField(required=False, max_length=500)


class RuleForm(forms.Form):
    """One field per setting in the rule's DEFAULTS, plus enabled/severity/re-notify."""

    enabled = forms.BooleanField(required=False)
    severity = forms.ChoiceField(choices=[("", "default"), ("info", "info"), ("warning", "warning"), ("critical", "critical")],
                                 required=False)
    renotify_s = forms.IntegerField(required=False, min_value=0, label="Re-notify every (s)")

    def __init__(self, *args, rule, **kwargs):
        super().__init__(*args, **kwargs)
        from .config import rule_settings

        self.rule = rule
        current = rule_settings(rule)
        self.fields["enabled"].initial = current.enabled
        self.fields["severity"].initial = current.severity
        for name, default in rule.DEFAULTS.items():
            self.fields[f"p_{name}"] = forms.FloatField(label=name, min_value=0, initial=current.params.get(name, default))

    def update_kwargs(self):
        data = self.cleaned_data
        params = {name: data[f"p_{name}"] for name in self.rule.DEFAULTS if data.get(f"p_{name}") is not None}
        return {"enabled": data["enabled"], "severity": data["severity"] or None, "params": params,
                "renotify_s": data.get("renotify_s")}
