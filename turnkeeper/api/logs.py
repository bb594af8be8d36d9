"""The server's log: one line per request, plain or (``--json-logs``) one JSON object.

A request line names method, path, status, duration and caller (``admin`` or
``share:<id>``), never a token and never a query string: the login URL carries one.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from fastapi import Request, Response

log = logging.getLogger("turnkeeper.api")

_EXTRA = ("method", "path", "status", "duration_ms", "caller")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in _EXTRA:
            if hasattr(record, key):
                line[key] = getattr(record, key)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, sort_keys=True)


def configure(json_logs: bool, level: int = logging.INFO) -> None:
    """Send turnkeeper's and uvicorn's logs to stderr, as JSON lines when asked."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if json_logs else logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    )
    for name in ("turnkeeper", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level)
        logger.propagate = False


async def log_requests(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    began = time.monotonic()
    try:
        response = await call_next(request)
    except Exception as error:
        # Nothing expected it: answered here, by the app's own handler for it (INTERNAL,
        # api/errors.py; a page on a page path). Left to Starlette's outermost
        # middleware it is answered too, but then raised on to uvicorn, which closes
        # the connection under a client that keeps it alive for its next request.
        answer = request.app.exception_handlers[Exception](request, error)
        response = answer if isinstance(answer, Response) else await answer
    principal = getattr(request.state, "principal", None)
    elapsed = round((time.monotonic() - began) * 1000, 1)
    log.info(
        "%s %s %s %.1fms",
        request.method,
        request.url.path,
        response.status_code,
        elapsed,
        extra={
            "method": request.method,
            "path": request.url.path,
            "status": response.status_code,
            "duration_ms": elapsed,
            "caller": principal.label if principal is not None else None,
        },
    )
    return response
