"""Structured JSON log lines on standard error, each carrying the current trace id, at the
level `BASTION_LOG_LEVEL` sets."""

from __future__ import annotations

import json
import logging
import sys
import traceback
from datetime import UTC, datetime
from typing import Literal

import msgspec
from opentelemetry import trace

from bastion.shared.settings import load_settings

__all__ = ["LogSettings", "configure_logging", "log_level"]

LogLevel = Literal["", "debug", "info", "warning", "error", "critical"]


class LogSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How much a process logs; every process reads it (`log_level`)."""

    log_level: LogLevel = ""
    """The least severe record a process logs: debug, info, warning, error or critical;
    empty: info for a service and the hook runner, errors only for the `bastion` command's
    libraries."""


def log_level(default: str) -> str:
    """`BASTION_LOG_LEVEL` as `logging` names levels, or `default` when it is empty.

    Raises:
        InvalidInput: it is not one of the levels; the sentence names the variable.
    """
    return (load_settings(LogSettings).log_level or default).upper()


_RESERVED = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def _traceback_without_values(error: BaseException | None) -> str:
    """Where an exception was raised, without its message: an exception's text may carry a
    secret or an agent's input (`ValueError("token=...")`), and logs keep neither whole."""
    if error is None:
        return ""
    frames = traceback.extract_tb(error.__traceback__)
    return "".join(traceback.format_list(frames)) + type(error).__qualname__


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, trace ids, and `extra` fields."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            line["trace_id"] = format(context.trace_id, "032x")
            line["span_id"] = format(context.span_id, "016x")
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                line[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            line["error_type"] = record.exc_info[0].__name__
            line["traceback"] = _traceback_without_values(record.exc_info[1])
        return json.dumps(line, default=str)


def configure_logging(service: str) -> None:
    """Send every log record of this process at `BASTION_LOG_LEVEL` (default info) or above
    to stderr as JSON lines tagged with `service`.

    Raises:
        InvalidInput: `BASTION_LOG_LEVEL` is not a level.
    """
    level = log_level("info")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("nats").setLevel(logging.WARNING)
