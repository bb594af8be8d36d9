"""One error shape on the wire: ``{"error": {"code", "reason", "message", "details"}}``.

The HTTP status is the taxonomy's (``turnkeeper.errors.HTTP_STATUS``), with one
exception: a caller without a (valid) token gets 401, the body saying
``PERMISSION_DENIED`` with reason ``no_token`` or ``invalid_token`` — the taxonomy
has no code of its own for it. Request validation is ``INVALID_ARGUMENT`` (400), an
unknown route ``NOT_FOUND``, and anything unexpected ``INTERNAL`` (500) without a
traceback: the traceback goes to the server's log only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from turnkeeper.api.access import Unauthenticated, app_routes
from turnkeeper.api.deps import JsonObject
from turnkeeper.errors import HTTP_STATUS, ErrorCode, TurnkeeperError
from turnkeeper.json_types import JsonDict, JsonList, JsonValue

log = logging.getLogger("turnkeeper.api")

# Validation messages quote the offending input; bounded so an answer stays small.
_MAX_PROBLEMS = 20
_MAX_TEXT = 300


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: ErrorCode
    reason: str
    message: str
    details: JsonObject = Field(default_factory=dict)


class ErrorBody(BaseModel):
    """Every refusal and failure of the API."""

    model_config = ConfigDict(extra="forbid")
    error: ErrorDetail


def error_response(
    code: ErrorCode,
    reason: str,
    message: str,
    details: JsonDict | None = None,
    *,
    status: int | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    error: JsonDict = {"code": code.value, "reason": reason, "message": message}
    error["details"] = details or {}
    body: JsonDict = {"error": error}
    return JSONResponse(body, status_code=status or HTTP_STATUS[code], headers=headers)


def _typed(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, TurnkeeperError)
    if isinstance(exc, Unauthenticated):
        return error_response(
            exc.code,
            exc.reason,
            exc.message,
            _plain_details(exc.details),
            status=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
    return error_response(exc.code, exc.reason, exc.message, _plain_details(exc.details))


def _plain_details(details: Mapping[str, object]) -> JsonDict:
    """An error's details as a JSON object (they may hold paths, tuples, sets)."""
    return {str(k): _plain(v) for k, v in details.items()}


def _plain(value: object) -> JsonValue:
    """A detail as a JSON value."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _invalid(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    found = exc.errors()[:_MAX_PROBLEMS]
    problems: JsonList = [
        {
            "location": [str(part) for part in problem.get("loc", ())],
            "message": str(problem.get("msg", ""))[:_MAX_TEXT],
            "type": str(problem.get("type", "")),
        }
        for problem in found
    ]
    # The first problem names the field and makes the message.
    location = [str(part) for part in found[0].get("loc", ())] if found else []
    message = str(found[0].get("msg", ""))[:_MAX_TEXT] if found else "invalid request"
    field = ".".join(location[1:]) or None
    details: JsonDict = {"problems": problems}
    if field:
        details["field"] = field
    return error_response(
        ErrorCode.INVALID_ARGUMENT,
        "invalid_request",
        f"{'.'.join(location) or 'request'}: {message}",
        details,
    )


def _allowed(request: Request) -> str:
    """Every method of every route at the request's path. Starlette's own ``Allow``
    names the first matching route's alone, and FastAPI makes a route per method (GET
    and DELETE of one session are two)."""
    methods: set[str] = set()
    for route in app_routes(request.app):
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


def _http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        return error_response(ErrorCode.NOT_FOUND, "no_such_route", "no such route")
    if exc.status_code == 405:
        return error_response(
            ErrorCode.INVALID_ARGUMENT,
            "method_not_allowed",
            "this route does not take that method",
            status=405,
            headers={**(exc.headers or {}), "Allow": _allowed(request)},
        )
    code = ErrorCode.INVALID_ARGUMENT if exc.status_code < 500 else ErrorCode.INTERNAL
    return error_response(code, "http_error", str(exc.detail)[:_MAX_TEXT], status=exc.status_code)


def _crash(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(ErrorCode.INTERNAL, "internal", "internal error (see the server log)")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(TurnkeeperError, _typed)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(Exception, _crash)


# Every operation's documented refusals (OpenAPI ``responses``).
ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    status: {"model": ErrorBody, "description": what}
    for status, what in (
        (400, "INVALID_ARGUMENT"),
        (401, "no token, or an unknown one (PERMISSION_DENIED, reason no_token/invalid_token)"),
        (403, "PERMISSION_DENIED"),
        (404, "NOT_FOUND"),
        (409, "ABORTED"),
        (412, "FAILED_PRECONDITION"),
        (422, "ALREADY_EXISTS"),
        (500, "INTERNAL or DATA_LOSS"),
        (503, "UNAVAILABLE"),
    )
}
