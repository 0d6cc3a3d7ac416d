"""Alert pages: list, one alert (timeline + deliveries), silences & maintenance, channels (with routing), rules;
ack/silence/end/maintenance/test/route/edit POSTs."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard.models import Engine
from dashboard.params import safe_next
from dashboard.roles import request_has_role, role_required

from . import selectors, services
from .forms import ChannelForm, MaintenanceForm, RuleForm, SilenceForm, route_formset
from .models import AlertEvent, MaintenanceWindow, NotificationChannel, Silence
from .rule_config import rule_settings
from .rules import REGISTRY


@require_GET
def index(request):
    filters = {k: request.GET.get(k, "").strip() for k in ("state", "rule", "engine")}
    context = {
        "alerts": selectors.alert_list(**filters),
        "filters": filters,
        "states": ["open", *AlertEvent.State.values],
        "rules": _rule_keys(),
        "engines": Engine.objects.values_list("name", flat=True),
        "silences": selectors.active_silences(),
        "maintenance": selectors.maintenance_windows(),
        "firing": selectors.firing_alerts(),
    }
    return render(request, "alerts/index.html", context)


@require_GET
def detail(request, pk):
    try:
        event = selectors.alert_detail(pk=pk)
    except AlertEvent.DoesNotExist:
        raise Http404("no such alert") from None
    return render(request, "alerts/detail.html", {"a": event, "silence_form": SilenceForm()})


def _back(request, event):
    target = safe_next(request)
    return HttpResponseRedirect(target) if target else redirect("alerts:detail", pk=event.pk)


@require_POST
@role_required("operator")
def ack(request, pk):
    event = get_object_or_404(AlertEvent, pk=pk)
    try:
        services.alert_ack(event=event, user=request.user)
        messages.success(request, f"Acknowledged {event.rule} on {event.subject}.")
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
    return _back(request, event)


@require_POST
@role_required("operator")
def silence(request, pk):
    event = get_object_or_404(AlertEvent, pk=pk)
    form = SilenceForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Silence not set: " + "; ".join(str(e) for errs in form.errors.values() for e in errs))
        return _back(request, event)
    try:
        s = services.silence_create(
            event=event, user=request.user, hours=form.cleaned_data["hours"], reason=form.cleaned_data["reason"]
        )
        messages.success(
            request, f"Silenced {s.rule} on {s.engine or s.host or 'everything'} until {s.until:%Y-%m-%d %H:%M} UTC."
        )
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
    return _back(request, event)


def _suppressions_page(request, form=None, status=200):
    context = {
        "silences": selectors.active_silences(),
        "windows": selectors.maintenance_windows(),
        "now": timezone.now(),
        "form": form or MaintenanceForm(),
    }
    return render(request, "alerts/silences.html", context, status=status)


@require_GET
def silences(request):
    return _suppressions_page(request)


@require_POST
@role_required("operator")
def maintenance_new(request):
    form = MaintenanceForm(request.POST)
    if not form.is_valid():
        return _suppressions_page(request, form, status=400)
    try:
        window = services.maintenance_create(user=request.user, **form.create_kwargs())
    except ValidationError as exc:
        form.add_error(None, exc)
        return _suppressions_page(request, form, status=400)
    messages.success(request, f"Maintenance window set: {window}.")
    return redirect("alerts:silences")


@require_POST
@role_required("operator")
def maintenance_end(request, pk):
    window = get_object_or_404(MaintenanceWindow, pk=pk)
    try:
        ended = services.maintenance_end(window=window, user=request.user)
        messages.success(request, f"Ended {window} early." if ended else f"Cancelled {window} before it started.")
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
    return redirect("alerts:silences")


@require_POST
@role_required("operator")
def silence_end(request, pk):
    silence = get_object_or_404(Silence, pk=pk)
    try:
        services.silence_end(silence=silence, user=request.user)
        covers = silence.engine or silence.host or "everything"
        messages.success(request, f"Ended the {silence.rule or 'all-rules'} silence on {covers}.")
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
    return redirect("alerts:silences")


def _rule_keys():
    # Keys seen in events too: external_alert_fire accepts any rule key, not only registered ones.
    return sorted(set(REGISTRY) | set(selectors.rule_keys_seen()))


def _channels_page(request, bound=None, status=200, create_form=None):
    """The channels; for admins each carries its routing form (BOUND replaces one after a failed submit)
    and the page a form to add one (CREATE_FORM: as submitted, with its errors at the fields)."""
    channels = selectors.channels_with_recent()
    if request_has_role(request, "admin"):
        rules = _rule_keys()
        for channel in channels:
            failed = bound is not None and bound.prefix == f"routes-{channel.pk}"
            channel.route_form = bound if failed else route_formset(channel, rules=rules)
    if create_form is None and request_has_role(request, "admin"):
        create_form = ChannelForm()
    return render(request, "alerts/channels.html", {"channels": channels, "create_form": create_form}, status=status)


@require_POST
@role_required("admin")
def channel_new(request):
    """Alerts → Channels → Add: a webhook (URL, secret, format), an email address or an Apprise URL."""
    form = ChannelForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Channel not added: see the marked fields below.")
        return _channels_page(request, status=400, create_form=form)
    d = form.cleaned_data
    channel = services.channel_create(
        name=d["name"],
        kind=d["kind"],
        address=d.get("address") or "",
        url=d.get("url") or "",
        secret=d.get("secret") or "",
        format=d.get("format") or "sparkops",
    )
    messages.success(request, f"Channel {channel.name} added; send it a test below.")
    return redirect("alerts:channels")


@require_GET
def channels(request):
    return _channels_page(request)


@require_POST
@role_required("admin")
def channel_routes(request, pk):
    channel = get_object_or_404(NotificationChannel, pk=pk)
    formset = route_formset(channel, rules=_rule_keys(), data=request.POST)
    if not formset.is_valid():
        return _channels_page(request, bound=formset, status=400)
    routes = services.channel_routes_set(channel=channel, routes=formset.routes())
    summary = ", ".join(f"{r.rule or 'every rule'} ≥ {r.min_severity}" for r in routes) or "everything"
    messages.success(request, f"{channel.name} now receives {summary}.")
    return redirect("alerts:channels")


@require_POST
@role_required("admin")
def channel_test(request, pk):
    channel = get_object_or_404(NotificationChannel, pk=pk)
    services.channel_send_test(channel=channel)
    messages.success(request, f"Test notification queued for {channel.name}; its result appears below.")
    return redirect("alerts:channels")


@require_GET
def rules(request):
    return _rules_page(request)


def _rules_page(request, *, bound=None, status=200):
    """The rules page; BOUND: a rule's form as submitted, drawn with its errors at the fields and its input kept."""

    rows = [
        {
            "rule": r,
            "settings": rule_settings(r),
            "form": bound if bound is not None and bound.rule.key == r.key else RuleForm(rule=r),
        }
        for r in REGISTRY.values()
    ]
    return render(
        request, "alerts/rules.html", {"rows": rows, "bound_key": bound.rule.key if bound else ""}, status=status
    )


@require_POST
@role_required("admin")
def rule_edit(request, key):
    rule = REGISTRY.get(key)
    if rule is None:
        raise Http404("no such rule")
    form = RuleForm(request.POST, rule=rule)
    if form.is_valid():
        try:
            services.rule_update(key=key, **form.update_kwargs())
            messages.success(request, f"Rule {key} updated.")
            return redirect("alerts:rules")
        except ValidationError as exc:
            form.add_error(None, exc)
    messages.error(request, f"Rule {key} not changed: see the marked fields below.")
    return _rules_page(request, bound=form, status=400)
