"""A small real HTTP service on 127.0.0.1 that counts effect applications per key.

The chaos harness starts one on a free port and points every scenario's ``http``
effect provider at it. It is the oracle for invariant 3 (an effect key is applied
at most once, and read back before any retry):

Each scenario has a namespace ``/s/<scenario>`` so its keys are its own.
``POST /s/<scenario>/effects`` applies: a request whose body arrived whole and parses
as JSON is counted under its ``Idempotency-Key`` header — every one, duplicates included, so a
double apply is visible — and its body stored. A request cut short (the control
plane SIGKILLed while sending it) never arrived, so it is not applied: like any
real server, the service applies only what it received.

``GET /s/<scenario>/effects/<key>`` reads back: 200 with ``{"key", "body", "count"}`` once
applied, else 404. A body carrying ``"unconfirmable": true`` makes the readback of
its key answer 503 once applied: a readback that cannot tell, which the runtime
must turn into an ``indeterminate`` effect and an operator gate, never a retry.

Every apply and readback is journaled per key, in the order the service saw them.
A key below means ``<scenario>/<idempotency key>``.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import quote, unquote

from pydantic import JsonValue

UNCONFIRMABLE = "unconfirmable"

Op = Literal["apply", "readback"]


@dataclass(frozen=True)
class ServiceOp:
    """One request the service answered for a key, in arrival order."""

    op: Op
    status: int


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _answer(self, status: int, payload: JsonValue = None) -> None:
        data = json.dumps(payload).encode() if payload is not None else b""
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the caller died waiting for the answer: what it sent still counts

    def _namespace(self) -> tuple[str, str] | None:
        """(scenario, the rest of the path) for ``/s/<scenario>/effects[/...]``."""
        parts = self.path.strip("/").split("/", 3)
        if len(parts) < 3 or parts[0] != "s" or parts[2] != "effects":
            return None
        return unquote(parts[1]), unquote(parts[3]) if len(parts) == 4 else ""

    def do_POST(self) -> None:
        service = self.server.service
        where = self._namespace()
        idem = self.headers.get("Idempotency-Key")
        key = None if where is None or idem is None else f"{where[0]}/{idem}"
        try:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
        except (OSError, ValueError):
            raw, length = b"", -1
        if key is None or len(raw) != length:
            service.note_aborted()
            self._answer(400, {"error": "incomplete request"})
            return
        try:
            body: JsonValue = json.loads(raw) if raw else None
        except ValueError:
            service.note_aborted()
            self._answer(400, {"error": "body is not JSON"})
            return
        service.apply(key, body)
        self._answer(201, {"key": key})

    def do_GET(self) -> None:
        where = self._namespace()
        if where is None or not where[1]:
            self._answer(404, {"error": "no such path"})
            return
        status, payload = self.server.service.readback(f"{where[0]}/{where[1]}")
        self._answer(status, payload)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, service: CountingService) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.service = service


class CountingService:
    """Start with ``with CountingService() as service:``; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._applied: Counter[str] = Counter()
        self._bodies: dict[str, JsonValue] = {}
        self._journal: dict[str, list[ServiceOp]] = {}
        self._aborted = 0
        self._server = _Server(self)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="chaos-counting-service", daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def provider_config(self, scenario: str) -> dict[str, JsonValue]:
        """The ``http`` effect provider's config for one scenario's namespace."""
        base = f"{self.base_url}/s/{quote(scenario, safe='')}/effects"
        return {"url": base, "readback_url": f"{base}/{{key}}", "timeout_seconds": 10}

    # --- the handler's side -------------------------------------------------------------

    def apply(self, key: str, body: JsonValue) -> None:
        with self._lock:
            self._applied[key] += 1
            self._bodies[key] = body
            self._journal.setdefault(key, []).append(ServiceOp("apply", 201))

    def readback(self, key: str) -> tuple[int, JsonValue]:
        payload: JsonValue
        with self._lock:
            count = self._applied[key]
            body = self._bodies.get(key)
            if not count:
                status, payload = 404, {"error": "no such key"}
            elif isinstance(body, dict) and body.get(UNCONFIRMABLE) is True:
                status, payload = 503, {"error": "cannot tell"}
            else:
                status, payload = 200, {"key": key, "body": body, "count": count}
            self._journal.setdefault(key, []).append(ServiceOp("readback", status))
        return status, payload

    def note_aborted(self) -> None:
        with self._lock:
            self._aborted += 1

    # --- the harness's side -------------------------------------------------------------

    def count(self, scenario: str, key: str) -> int:
        with self._lock:
            return self._applied[f"{scenario}/{key}"]

    def counts(self, scenario: str) -> dict[str, int]:
        """Applications per idempotency key in ``scenario``'s namespace."""
        prefix = f"{scenario}/"
        with self._lock:
            return {
                k.removeprefix(prefix): n
                for k, n in self._applied.items()
                if k.startswith(prefix) and n
            }

    def journal(self, scenario: str, key: str) -> list[ServiceOp]:
        with self._lock:
            return list(self._journal.get(f"{scenario}/{key}", ()))

    @property
    def aborted(self) -> int:
        with self._lock:
            return self._aborted

    def forge_apply(self, scenario: str, key: str, body: JsonValue = None) -> None:
        """Count an application nobody made through the provider (checker self-tests)."""
        self.apply(f"{scenario}/{key}", body)

    def __enter__(self) -> CountingService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
