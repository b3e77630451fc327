"""Logging set-up: human-readable text by default, one JSON object per line on request."""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        # Structured extras passed as logger.info(..., extra={"pod": ...}) become fields.
        doc.update(
            {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}
        )
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def configure(fmt: str = "text", level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log and kopf's chatter are not ours to show at INFO.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
