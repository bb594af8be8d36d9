"""A small real HTTP service on 127.0.0.1 that counts applications per idempotency key.

``POST /effects`` (any path under ``/effects``) applies: it counts the request under
its ``Idempotency-Key`` header — every request, duplicates included, so a double
apply is visible — and stores the JSON body. ``GET /effects/<key>`` reads back:
200 with ``{"key", "body", "count"}`` once applied, else 404.

Faults for tests: ``POST /drop`` counts the application but stores nothing (its
readback stays 404); ``GET /blind/<key>`` always answers 503 (a readback that
cannot tell); ``GET /flaky/<key>`` answers 404 until the key was applied, then 503
(an apply whose readback can no longer confirm it).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote


class CountingService:
    def __init__(self) -> None:
        self.applied: Counter[str] = Counter()  # every apply request per key
        self.bodies: dict[str, Any] = {}
        self.readbacks: Counter[str] = Counter()
        self.lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, payload: Any = None) -> None:
                data = json.dumps(payload).encode() if payload is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                key = self.headers.get("Idempotency-Key")
                if key is None:
                    self._answer(400, {"error": "no Idempotency-Key"})
                    return
                with service.lock:
                    service.applied[key] += 1
                    if not self.path.startswith("/drop"):
                        service.bodies[key] = json.loads(raw) if raw else None
                self._answer(201, {"key": key})

            def do_GET(self) -> None:
                kind, _, key = self.path.strip("/").partition("/")
                key = unquote(key)
                with service.lock:
                    service.readbacks[key] += 1
                    known = key in service.bodies
                    body = service.bodies.get(key)
                    count = service.applied[key]
                if kind == "blind" or (kind == "flaky" and count):
                    self._answer(503, {"error": "cannot tell"})
                elif known:
                    self._answer(200, {"key": key, "body": body, "count": count})
                else:
                    self._answer(404, {"error": "no such key"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def provider_config(
        self, *, apply: str = "effects", readback: str = "effects"
    ) -> dict[str, Any]:
        """An ``http`` provider config against this service."""
        return {"url": f"{self.base}/{apply}", "readback_url": f"{self.base}/{readback}/{{key}}"}

    def count(self, key: str) -> int:
        with self.lock:
            return self.applied[key]

    def total(self) -> int:
        with self.lock:
            return sum(self.applied.values())

    def __enter__(self) -> CountingService:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
