"""Log line formats (settings.LOGGING): SPARKOPS_LOG_FORMAT=plain (the default) or json, one
JSON object per line. Under journald (systemd sets JOURNAL_STREAM for a unit whose output
goes to the journal) a line carries no timestamp of its own: the journal stamps each line."""

import json
import logging
import os
from datetime import UTC, datetime
from typing import Any

FORMATS = ("plain", "json")


def under_journald() -> bool:
    return bool(os.environ.get("JOURNAL_STREAM"))


class JsonFormatter(logging.Formatter):
    """{"time": ISO-8601 UTC, "level", "logger", "message", "exception"?, "process"} per line;
    `time` is left out under journald."""

    def __init__(self, *args: Any, timestamp: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timestamp = timestamp

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {}
        if self.timestamp:
            entry["time"] = self.formatTime(record)
        entry.update(level=record.levelname, logger=record.name, message=record.getMessage(), process=record.process)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: ARG002 (logging.Formatter's signature)
        return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")


def formatters(log_format: str, journald: bool) -> dict[str, dict[str, Any]]:
    """The `formatters` entry of settings.LOGGING, with the one named "default" in use."""
    if log_format == "json":
        return {"default": {"()": JsonFormatter, "timestamp": not journald}}
    plain = "%(levelname)s %(name)s: %(message)s"
    return {"default": {"format": plain if journald else "%(asctime)s " + plain}}
