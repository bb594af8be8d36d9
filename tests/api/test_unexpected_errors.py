"""The API's safety net: an error nothing expected is ``500 INTERNAL``, its details in
the server's log only — no traceback, no message of the exception, on the wire.

Nothing the API accepts by its schema should get here (tests/api/test_openapi.py and
test_workspace_paths.py see to that); this keeps the net itself honest, on a real
uvicorn, for a JSON route and for a page, and the client's kept-alive connection
open after it.
"""

from __future__ import annotations

import logging
import socket
import time

import httpx
import pytest

from tests.api.conftest import ADMIN, ApiProject, served
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.web import views

SECRET = "/home/someone/private/thing-only-the-log-may-say"


def _boom(*_args: object, **_kwargs: object) -> None:
    raise OSError(36, "File name too long", SECRET)


def test_an_unexpected_error_is_internal_without_its_details(
    api_project: ApiProject, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(SessionService, "list", _boom)
    monkeypatch.setattr(views, "sessions_view", _boom)
    auth = {"Authorization": f"Bearer {ADMIN}"}
    with (
        served(api_project.app) as base,
        httpx.Client(base_url=base, timeout=30) as client,
        caplog.at_level(logging.ERROR, logger="turnkeeper.api"),
    ):
        answer = client.get("/v1/sessions", headers=auth)
        assert client.get("/", params={"token": ADMIN}).status_code == 303  # signed in
        page = client.get("/")
    assert answer.status_code == 500
    assert answer.json() == {
        "error": {
            "code": "INTERNAL",
            "reason": "internal",
            "message": "internal error (see the server log)",
            "details": {},
        }
    }
    assert page.status_code == 500
    assert page.headers["content-type"].startswith("text/html")
    for body in (answer.text, page.text):
        assert SECRET not in body and "Traceback" not in body and "OSError" not in body
    assert SECRET in caplog.text  # the server's log has what happened


def _get_twice_on_one_connection(base: str, path: str) -> list[bytes]:
    """Two requests, one after the other, on one kept-alive connection: each status
    line (b"" for an answer that never came: the connection was closed)."""
    host, port = base.removeprefix("http://").split(":")
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {ADMIN}\r\n\r\n"
    ).encode()
    lines: list[bytes] = []
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        for _ in range(2):
            try:
                conn.sendall(request)
                answer = b""
                while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    answer += chunk
            except ConnectionResetError:
                answer = b""
            lines.append(answer.split(b"\r\n", 1)[0])
            time.sleep(0.2)  # the server has done whatever it does after an answer
    return lines


def test_the_connection_outlives_an_unexpected_error(
    api_project: ApiProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Starlette answers an unexpected error and then raises it on to uvicorn, which
    # closed the connection: a client's next request on it was reset.
    monkeypatch.setattr(SessionService, "list", _boom)
    with served(api_project.app) as base:
        lines = _get_twice_on_one_connection(base, "/v1/sessions")
    assert lines == [b"HTTP/1.1 500 Internal Server Error"] * 2, lines
