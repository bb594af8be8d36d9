"""A webhook receiver the tests start on 127.0.0.1: a real HTTP server in a thread.

It answers each POST as its ``script`` says, in order — a status code, or ``HOLD``:
keep the request unanswered until :meth:`Receiver.release` (so a test can kill the
sender while its POST is in flight) — then 200 to every later one. Every request is
kept: its headers, its body, and what it was answered (None: never answered).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from pydantic import SecretStr

from turnkeeper.notify.signing import KEY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, verify

HOLD: Final = -1


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    answered: int | None = None

    @property
    def key(self) -> str:
        return self.headers[KEY_HEADER]

    def json(self) -> Any:
        return json.loads(self.body)

    def signed_with(self, secret: str) -> bool:
        return verify(
            SecretStr(secret),
            self.headers[TIMESTAMP_HEADER],
            self.body,
            self.headers[SIGNATURE_HEADER],
        )


class Receiver:
    def __init__(self, script: Sequence[int] = ()) -> None:
        self.script = list(script)
        self.received: list[Received] = []
        self.lock = threading.Lock()
        self.held = threading.Event()  # a HOLD request has arrived
        self._release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                got = Received(dict(self.headers.items()), self.rfile.read(length))
                with receiver.lock:
                    receiver.received.append(got)
                    answer = receiver.script.pop(0) if receiver.script else 200
                if answer == HOLD:
                    receiver.held.set()
                    receiver._release.wait(60)
                    return  # the sender is gone by now: nothing to answer
                got.answered = answer
                self.send_response(answer)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the test reads ``received``

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def release(self) -> None:
        self._release.set()

    def accepted(self) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.answered is not None and 200 <= r.answered < 300]

    def count(self) -> int:
        with self.lock:
            return len(self.received)


@contextmanager
def receiving(script: Sequence[int] = ()) -> Iterator[Receiver]:
    receiver = Receiver(script)
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.release()
        receiver.server.shutdown()
        receiver.server.server_close()
        thread.join(10)
