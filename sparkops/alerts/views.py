"""Alert pages: list, one alert (timeline + deliveries), silences & maintenance, channels (with routing), rules;
ack/silence/end/maintenance/test/route/edit POSTs."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard.models import Engine
from dashboard.params import safe_next
from dashboard.roles import SignedInRequest, request_has_role, role_required

from . import selectors, services
from .custom_model import KEY_PREFIX, CustomRule
from .forms import BaseRouteFormSet, ChannelForm, MaintenanceForm, RuleForm, SilenceForm, route_formset
from .models import AlertEvent, MaintenanceWindow, NotificationChannel, Silence
from .rules import REGISTRY
from .rules_page import rules_page


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    filters = {k: request.GET.get(k, "").strip() for k in ("state", "rule", "engine")}
    context = {
        "alerts": selectors.alert_list(state=filters["state"], rule=filters["rule"], engine=filters["engine"]),
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
def detail(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        event = selectors.alert_detail(pk=pk)
    except AlertEvent.DoesNotExist:
        raise Http404("no such alert") from None
    return render(request, "alerts/detail.html", {"a": event, "silence_form": SilenceForm()})


def _back(request: HttpRequest, event: AlertEvent) -> HttpResponse:
    target = safe_next(request)
    return HttpResponseRedirect(target) if target else redirect("alerts:detail", pk=event.pk)


@require_POST
@role_required("operator")
def ack(request: SignedInRequest, pk: int) -> HttpResponse:
    event = get_object_or_404(AlertEvent, pk=pk)
    try:
        services.alert_ack(event=event, user=request.user)
        messages.success(request, f"Acknowledged {event.rule} on {event.subject}.")
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
    return _back(request, event)


@require_POST
@role_required("operator")
def silence(request: SignedInRequest, pk: int) -> HttpResponse:
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


def _suppressions_page(request: HttpRequest, form: MaintenanceForm | None = None, status: int = 200) -> HttpResponse:
    context = {
        "silences": selectors.active_silences(),
        "windows": selectors.maintenance_windows(),
        "now": timezone.now(),
        "form": form or MaintenanceForm(),
    }
    return render(request, "alerts/silences.html", context, status=status)


@require_GET
def silences(request: HttpRequest) -> HttpResponse:
    return _suppressions_page(request)


@require_POST
@role_required("operator")
def maintenance_new(request: SignedInRequest) -> HttpResponse:
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
def maintenance_end(request: SignedInRequest, pk: int) -> HttpResponse:
    window = get_object_or_404(MaintenanceWindow, pk=pk)
    try:
        ended = services.maintenance_end(window=window, user=request.user)
        messages.success(request, f"Ended {window} early." if ended else f"Cancelled {window} before it started.")
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
    return redirect("alerts:silences")


@require_POST
@role_required("operator")
def silence_end(request: SignedInRequest, pk: int) -> HttpResponse:
    silence = get_object_or_404(Silence, pk=pk)
    try:
        services.silence_end(silence=silence, user=request.user)
        covers = silence.engine or silence.host or "everything"
        messages.success(request, f"Ended the {silence.rule or 'all-rules'} silence on {covers}.")
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
    return redirect("alerts:silences")


def _rule_keys() -> list[str]:
    # Keys seen in events too: external_alert_fire accepts any rule key, not only registered ones.
    custom = {KEY_PREFIX + name for name in CustomRule.objects.values_list("name", flat=True)}
    return sorted(set(REGISTRY) | set(selectors.rule_keys_seen()) | custom)


def _channels_page(
    request: HttpRequest,
    bound: BaseRouteFormSet | None = None,
    status: int = 200,
    create_form: ChannelForm | None = None,
) -> HttpResponse:
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
def channel_new(request: HttpRequest) -> HttpResponse:
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
def channels(request: HttpRequest) -> HttpResponse:
    return _channels_page(request)


@require_POST
@role_required("admin")
def channel_routes(request: HttpRequest, pk: int) -> HttpResponse:
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
def channel_test(request: HttpRequest, pk: int) -> HttpResponse:
    channel = get_object_or_404(NotificationChannel, pk=pk)
    services.channel_send_test(channel=channel)
    messages.success(request, f"Test notification queued for {channel.name}; its result appears below.")
    return redirect("alerts:channels")


@require_GET
def rules(request: HttpRequest) -> HttpResponse:
    return rules_page(request)


@require_POST
@role_required("admin")
def rule_edit(request: HttpRequest, key: str) -> HttpResponse:
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
    return rules_page(request, bound=form, status=400)
