"""The availability page (/availability/), its CSV (/availability.csv) and its API
(/api/availability/): `?period=day|week|month&start=YYYY-MM-DD`; a bad period is a 400 with the
reason. Every signed-in role may read them (the API also with a read-only token)."""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard.csv_export import Number, csv_text

from .periods import KINDS, PeriodError, period_parse
from .report import Outage, Planned, Report, Row, availability_report

CSV_COLUMNS = [
    "kind",
    "name",
    "period_start",
    "period_end",
    "uptime_pct",
    "downtime_s",
    "planned_down_s",
    "unknown_s",
    "incidents",
    "mean_time_to_detect_s",
    "mean_time_to_recover_s",
    "planned_work",
]


def _report(request: HttpRequest) -> Report:
    now = timezone.now()
    period = period_parse(kind=request.GET.get("period", ""), start=request.GET.get("start", "").strip(), now=now)
    return availability_report(period=period, now=now)


@require_GET
def availability_page(request: HttpRequest) -> HttpResponse:
    try:
        report = _report(request)
    except PeriodError as exc:
        return render(request, "availability/page.html", {"error": str(exc), "kinds": KINDS}, status=400)
    period = report.period
    return render(
        request,
        "availability/page.html",
        {
            "report": report,
            "kinds": KINDS,
            "engines": [r for r in report.rows if r.kind == "engine"],
            "boxes": [r for r in report.rows if r.kind == "box"],
            "previous": period.previous_day.isoformat(),
            "next": period.next_day.isoformat() if period.end <= timezone.now() else "",
            "running": report.end < period.end,
        },
    )


@require_GET
def availability_csv(request: HttpRequest) -> HttpResponse:
    try:
        report = _report(request)
    except PeriodError as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain; charset=utf-8")
    rows = [
        [
            r.kind,
            r.name,
            report.start.isoformat(),
            report.end.isoformat(),
            Number(r.uptime_pct, "{:.2f}") if r.uptime_pct is not None else "",
            Number(round(r.down_s)),
            Number(round(r.planned_down_s)),
            Number(round(r.unknown_s)),
            Number(len(r.incidents)),
            Number(r.mttd_s, "{:.1f}") if r.mttd_s is not None else "",
            Number(r.mttr_s, "{:.1f}") if r.mttr_s is not None else "",
            Number(len(r.planned)),
        ]
        for r in report.rows
    ]
    response = HttpResponse(csv_text(CSV_COLUMNS, rows), content_type="text/csv; charset=utf-8")
    name = f"availability-{report.period.kind}-{report.period.first_day.isoformat()}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@require_GET
def availability_api(request: HttpRequest) -> JsonResponse:
    try:
        report = _report(request)
    except PeriodError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse(report_as_dict(report))


def report_as_dict(report: Report) -> dict:
    return {
        "period": report.period.kind,
        "start": report.start.isoformat(),
        "end": report.end.isoformat(),
        "complete": report.end >= report.period.end,
        "rows": [_row(r) for r in report.rows],
    }


def _row(row: Row) -> dict:
    return {
        "kind": row.kind,
        "name": row.name,
        "measured_s": row.measured_s,
        "uptime_pct": row.uptime_pct,
        "downtime_s": row.down_s,
        "planned_down_s": row.planned_down_s,
        "unknown_s": row.unknown_s,
        "mean_time_to_detect_s": row.mttd_s,
        "mean_time_to_recover_s": row.mttr_s,
        "days": [
            {"date": d.day.isoformat(), "uptime_pct": d.uptime_pct, "measured_s": d.measured_s, "downtime_s": d.down_s}
            for d in row.days
        ],
        "incidents": [_outage(o) for o in row.incidents],
        "planned": [_planned(p) for p in row.planned]
        + [{**_outage(o), "kind": "down during planned work"} for o in row.outages if o.planned_by],
    }


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def _outage(o: Outage) -> dict:
    return {
        "alert": o.event_id,
        "cause": o.cause,
        "message": o.message,
        "started_at": _iso(o.started_at),
        "fired_at": _iso(o.fired_at),
        "resolved_at": _iso(o.resolved_at),
        "time_to_detect_s": o.detect_s,
        "time_to_recover_s": o.recover_s,
        "counted_s": o.counted_s,
        "planned_by": o.planned_by,
    }


def _planned(p: Planned) -> dict:
    return {
        "kind": p.kind,
        "title": p.title,
        "outcome": p.outcome,
        "start": _iso(p.start),
        "end": _iso(p.end),
        "seconds": p.seconds,
    }
