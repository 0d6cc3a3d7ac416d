"""Every CSV the project writes goes through here, so no cell is ever a live spreadsheet formula.

A text cell that begins with `=`, `+`, `-`, `@`, a tab or a carriage return is what Excel,
LibreOffice and Google Sheets run as a formula (`=HYPERLINK(…)`, `=cmd|' /C calc'!A0`); OWASP's
rule for CSV injection is to prefix such a cell with a single quote, which spreadsheets show as
text. Numbers stay numbers: an int or float cell, or a `Number` (the text of a number a row
builder formatted, e.g. "-3.50" or "2,780,000"), is written as it is, so -3.5 stays -3.5."""

import csv
import io
from collections.abc import Iterable
from decimal import Decimal
from typing import IO, Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class Number(str):
    """The formatted text of a number (a numeric field, never user text): written to CSV as it is."""

    def __new__(cls, value: float | Decimal, fmt: str = "{}") -> "Number":
        if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
            raise TypeError(f"Number() formats a number, not {type(value).__name__}")
        return super().__new__(cls, fmt.format(value))


def csv_cell(value: object) -> str | int | float | Decimal:
    """VALUE as one safe CSV cell: numbers as they are, text that a spreadsheet would run prefixed with '."""
    if value is None:
        return ""
    if isinstance(value, Number) or (isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)):
        return value
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


class SafeWriter:
    """csv.writer whose every cell goes through csv_cell."""

    def __init__(self, out: IO[str], **fmtparams: Any) -> None:
        self._writer = csv.writer(out, **fmtparams)

    def writerow(self, row: Iterable[object]) -> Any:
        return self._writer.writerow([csv_cell(v) for v in row])

    def writerows(self, rows: Iterable[Iterable[object]]) -> None:
        for row in rows:
            self.writerow(row)


def csv_text(columns: Iterable[object], rows: Iterable[Iterable[object]]) -> str:
    """A whole CSV document (header COLUMNS, then ROWS) as text."""
    out = io.StringIO()
    writer = SafeWriter(out)
    writer.writerow(columns)
    writer.writerows(rows)
    return out.getvalue()
