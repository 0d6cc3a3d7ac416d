"""The local inbox's receiver (no login: the HMAC signature is its credential) and its page."""

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from .inbox import DEMO_CHANNEL, RECEIVE_PATH, Refused, inbox_receive, inbox_rows
from .models import NotificationChannel


@login_not_required
@csrf_exempt
@require_POST
def receive(request: HttpRequest) -> HttpResponse:
    if request.content_type != "application/json":
        return JsonResponse({"error": "the body must be JSON (Content-Type: application/json)"}, status=415)
    try:
        message, created = inbox_receive(
            body=request.body,
            signature=request.headers.get("X-SparkOps-Signature", ""),
            idempotency_key=request.headers.get("Idempotency-Key", ""),
        )
    except Refused as exc:
        return JsonResponse({"error": str(exc)}, status=exc.status)
    return JsonResponse({"id": message.pk, "duplicate": not created}, status=201 if created else 200)


@require_GET
def inbox(request: HttpRequest) -> HttpResponse:
    channels = [
        c
        for c in NotificationChannel.objects.filter(kind=NotificationChannel.Kind.WEBHOOK)
        if c.config.get("url", "").endswith(RECEIVE_PATH)
    ]
    context = {"rows": inbox_rows(), "channels": channels, "demo_channel": DEMO_CHANNEL, "receive_path": RECEIVE_PATH}
    template = "alerts/_inbox_rows.html" if request.GET.get("partial") else "alerts/inbox.html"
    return render(request, template, context)
