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
