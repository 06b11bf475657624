"""Log output for the commands that run as services: text for a terminal, or one JSON object
per line (``MODSTREAM_LOG_FORMAT=json``) for a platform's log shipper. librdkafka's own lines
come through the same logging (``Settings.kafka_common`` hands every client :data:`LIBRDKAFKA`),
instead of going raw to stderr."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Literal

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The logger confluent-kafka gives librdkafka's lines to (its ``logger`` client setting).
LIBRDKAFKA = logging.getLogger("librdkafka")


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: a traceback is a field, never more lines."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False)


def configure(level: str | int, fmt: LogFormat) -> None:
    """The root logger's one handler, on stderr, in ``fmt``; replaces any earlier configuration."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
