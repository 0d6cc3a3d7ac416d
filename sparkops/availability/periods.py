"""The period a report covers: a day, an ISO week (Monday first) or a calendar month, in the
server's time zone (settings.TIME_ZONE), so "Tuesday" is the operator's Tuesday."""

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.utils import timezone

KINDS = ("day", "week", "month")
FIRST_YEAR, LAST_YEAR = 1970, 9000


class PeriodError(ValueError):
    """A period the user asked for that cannot be reported; the message says why."""


@dataclass(frozen=True)
class Period:
    kind: str
    first_day: date

    @property
    def start(self) -> datetime:
        return _midnight(self.first_day)

    @property
    def end(self) -> datetime:
        return _midnight(self.next_day)

    @property
    def next_day(self) -> date:
        if self.kind == "day":
            return self.first_day + timedelta(days=1)
        if self.kind == "week":
            return self.first_day + timedelta(days=7)
        year, month = divmod(self.first_day.month, 12)
        return date(self.first_day.year + year, month + 1, 1)

    @property
    def previous_day(self) -> date:
        if self.kind == "day":
            return self.first_day - timedelta(days=1)
        if self.kind == "week":
            return self.first_day - timedelta(days=7)
        return (self.first_day - timedelta(days=1)).replace(day=1)

    def days(self) -> list[tuple[date, datetime, datetime]]:
        """(day, its start, its end) of every day of the period."""
        count = (self.next_day - self.first_day).days
        days = [self.first_day + timedelta(days=i) for i in range(count)]
        return [(d, _midnight(d), _midnight(d + timedelta(days=1))) for d in days]

    @property
    def label(self) -> str:
        if self.kind == "day":
            return self.first_day.isoformat()
        if self.kind == "week":
            year, week, _ = self.first_day.isocalendar()
            return f"{year}-W{week:02d} (from {self.first_day.isoformat()})"
        return self.first_day.strftime("%Y-%m")


def _midnight(day: date) -> datetime:
    return timezone.make_aware(datetime(day.year, day.month, day.day))


def period_parse(*, kind: str, start: str, now: datetime) -> Period:
    """The period of KIND ("day", "week", "month"; blank: "day") holding the date START (ISO
    YYYY-MM-DD, or YYYY-MM for a month; blank: today)."""
    kind = kind or "day"
    if kind not in KINDS:
        raise PeriodError(f"period must be day, week or month, not {kind!r}.")
    day = timezone.localdate(now)
    if start:
        try:
            day = date.fromisoformat(start + "-01" if len(start) == 7 else start)
        except ValueError:
            raise PeriodError(f"start must be a date such as 2026-12-06, not {start!r}.") from None
        if not FIRST_YEAR <= day.year <= LAST_YEAR:  # a period must have a previous and a next one
            raise PeriodError(f"start must lie between the years {FIRST_YEAR} and {LAST_YEAR}, not {start!r}.")
    if kind == "week":
        day -= timedelta(days=day.weekday())
    elif kind == "month":
        day = day.replace(day=1)
    return Period(kind, day)
