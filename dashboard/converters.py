"""URL converters, registered by DashboardConfig.ready (dashboard/apps.py): `<id:pk>` in every
URL pattern that takes a row id, so a number no row can have is a 404, never a database error."""

from dashboard.params import DB_INT_MAX


class IdConverter:
    """`<id:pk>`: a row id, 1 to 2**63 - 1; any other number matches no URL pattern (a 404)."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if not 1 <= number <= DB_INT_MAX:
            raise ValueError(f"{value} is no row id")  # Django reads a ValueError as "no match"
        return number

    def to_url(self, value: int | str) -> str:
        return str(int(value))
