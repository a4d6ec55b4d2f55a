"""How the command line logs: text lines (control characters escaped) or, with
``--log-format json``, one JSON object a line; progress lines (``gpurag.progress``) at INFO
unless ``--quiet``."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from gpurag.terminal import SafeFormatter

LOG_FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    """One JSON object a record: time (UTC, ISO 8601), level, logger, message, and a
    progress line's fields (stage, event, done, total, unit, rate_per_s, eta_s, ...)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(), "logger": record.name,
            "message": record.getMessage(),
        }
        progress = getattr(record, "progress", None)
        if isinstance(progress, dict):
            out.update({k: v for k, v in progress.items() if k not in out})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure_logging(verbose: bool = False, quiet: bool = False, fmt: str = "text") -> None:
    """The process's logging for one command: WARNING (DEBUG with ``verbose``), progress
    lines at INFO unless ``quiet``, on stderr as ``fmt`` (text | json)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json"
                         else SafeFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        handlers=[handler])
    progress = logging.getLogger("gpurag.progress")
    progress.setLevel(logging.WARNING if quiet and not verbose else logging.INFO)
