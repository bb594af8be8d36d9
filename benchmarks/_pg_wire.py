"""What crosses the wire to PostgreSQL, counted outside the client library.

:class:`WireTap` is a TCP relay on a loopback port in front of the server: a client
pointed at :meth:`WireTap.url` talks to the server through it, and while the tap is
:meth:`WireTap.counting` it counts, per connection,

* **round trips** — each time the server sends after the client sent since the
  server last did: one request flight and its answer, however many statements the
  flight carried (a pipeline is one) and however many packets either side used;
* the server's **CommandComplete** tags by their first word (``COMMIT``, ``INSERT``,
  ``SELECT`` ...) — ``COMMIT`` is one transaction committed on the server;
* **ReadyForQuery** messages — one per exchange the server closed (``Sync`` or a
  simple query).

The server's side of the protocol is parsed (type byte, 32-bit length, body); the
client's bytes are passed on unread. The relay asks libpq for no TLS or GSS
encryption (``sslmode=disable``, ``gssencmode=disable`` in :meth:`url`): their
one-byte answers are not protocol messages. Everything is loopback; the relay stops
with :meth:`close`.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

_CHUNK = 65536
_ACCEPT_POLL_S = 0.2


@dataclass
class WireCount:
    round_trips: int = 0
    tags: Counter[str] = field(default_factory=Counter)
    ready: int = 0

    def per(self, n: int) -> dict[str, object]:
        """Per ``n`` operations (turns, steps)."""
        n = max(n, 1)
        return {
            "round_trips": self.round_trips / n,
            "commits": self.tags.get("COMMIT", 0) / n,
            "exchanges": self.ready / n,
            "statements": {k: v / n for k, v in sorted(self.tags.items(), key=lambda kv: -kv[1])},
        }


class _Link:
    """One client connection and its server connection, pumped by two threads."""

    def __init__(self, tap: WireTap, client: socket.socket, server: socket.socket) -> None:
        self._tap = tap
        self._client = client
        self._server = server
        self._client_sent = False  # since the server last sent
        self._buffer = b""
        threading.Thread(target=self._up, daemon=True).start()
        threading.Thread(target=self._down, daemon=True).start()

    def _up(self) -> None:
        try:
            while data := self._client.recv(_CHUNK):
                with self._tap.lock:
                    self._client_sent = True  # before the server can answer it
                self._server.sendall(data)
        except OSError:
            pass  # either side closed: the other pump ends too
        finally:
            self.shut()

    def _down(self) -> None:
        try:
            while data := self._server.recv(_CHUNK):
                with self._tap.lock:
                    if self._client_sent:
                        self._client_sent = False
                        if self._tap.active:
                            self._tap.count.round_trips += 1
                    self._parse(data)
                self._client.sendall(data)
        except OSError:
            pass
        finally:
            self.shut()

    def _parse(self, data: bytes) -> None:
        """Count the server's messages in ``data`` (the tap's lock held)."""
        buf = self._buffer + data
        at = 0
        while len(buf) - at >= 5:
            kind = buf[at : at + 1]
            (length,) = struct.unpack_from("!I", buf, at + 1)
            end = at + 1 + length
            if end > len(buf):
                break
            if self._tap.active:
                if kind == b"C":
                    tag = buf[at + 5 : end - 1].decode("ascii", "replace").split(" ", 1)[0]
                    self._tap.count.tags[tag] += 1
                elif kind == b"Z":
                    self._tap.count.ready += 1
            at = end
        self._buffer = buf[at:]

    def shut(self) -> None:
        for sock in (self._client, self._server):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class WireTap:
    """A counting relay in front of the PostgreSQL server of ``server_url``."""

    def __init__(self, server_url: str) -> None:
        parts = urlsplit(server_url)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_ACCEPT_POLL_S)
        self.port = self._listener.getsockname()[1]
        self.lock = threading.Lock()
        self.active = False
        self.count = WireCount()
        self._closed = threading.Event()
        self._links: list[_Link] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def url(self, database_url: str) -> str:
        """``database_url`` (same user, database and options) through the relay."""
        parts = urlsplit(database_url)
        netloc = parts.netloc.rsplit("@", 1)
        user = netloc[0] + "@" if len(netloc) == 2 else ""
        query = [q for q in parts.query.split("&") if q]
        query += ["sslmode=disable", "gssencmode=disable"]
        return urlunsplit(
            (parts.scheme, f"{user}127.0.0.1:{self.port}", parts.path, "&".join(query), "")
        )

    @contextmanager
    def counting(self) -> Iterator[WireCount]:
        """Count from now to the block's end; the count is filled in as it goes."""
        with self.lock:
            self.count = WireCount()
            self.active = True
        try:
            yield self.count
        finally:
            with self.lock:
                self.active = False

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self._upstream)
            except OSError:
                client.close()
                continue
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._links.append(_Link(self, client, server))

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        self._thread.join(timeout=2 * _ACCEPT_POLL_S + 1)
        for link in self._links:
            link.shut()
