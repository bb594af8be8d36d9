"""The HTTP side shared by the fake model servers: scripted replies, SSE, a request log."""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Text:
    """The model answers with a message and ends its turn."""

    text: str


@dataclass(frozen=True)
class Shell:
    """The model asks the CLI to run a shell command (for real).

    ``wait``: the model waits for a long command to exit, as a real one does. Codex's
    ``exec_command`` answers after a while with the process still running; the model
    then polls it (``write_stdin`` with nothing to write) until it has exited, and
    only the final answer counts as the command's result. Other CLIs wait anyway.
    """

    command: str
    description: str = "run a shell command"
    wait: bool = False


@dataclass(frozen=True)
class Stall:
    """The stream opens and then waits until the test calls ``release()``; it then
    finishes as ``then``. The server records it in ``stalled``."""

    then: Text = Text("released")


@dataclass(frozen=True)
class Malformed:
    """A stream of broken events that never completes properly."""

    garbage: str = "{this is not json"


@dataclass(frozen=True)
class Tool:
    """The model calls tool ``name`` of MCP server ``server`` with ``arguments``, the way
    each API names it (Codex: a function call in the server's namespace
    ``mcp__<server>``; Claude: the tool ``mcp__<server>__<name>``)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    server: str = "turnkeeper"


Reply = Text | Shell | Stall | Malformed | Tool


@dataclass(frozen=True)
class Rule:
    """Answer a prompt containing ``match``: reply *n* after *n* tool results."""

    match: str
    replies: Sequence[Reply]


@dataclass
class RecordedRequest:
    method: str
    path: str
    body: dict[str, Any]
    prompt: str | None = None
    step: int = 0
    auxiliary: bool = False
    reply: Reply | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        """The whole body as JSON text, for substring checks on the history."""
        return json.dumps(self.body)

    def tool_outputs(self) -> list[str]:
        """The text of every tool result in the request's history, oldest first (the
        Responses API's ``function_call_output`` items, the Messages API's
        ``tool_result`` blocks)."""
        out: list[str] = []
        items = self.body.get("input")
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                out.append(_content_text(item.get("output")))
        messages = self.body.get("messages")
        for message in messages if isinstance(messages, list) else []:
            content = message.get("content") if isinstance(message, dict) else None
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    out.append(_content_text(block.get("content")))
        return out

    def last_tool_output(self) -> str | None:
        """What the model was told its latest tool call answered (None: no tool result)."""
        outputs = self.tool_outputs()
        return outputs[-1] if outputs else None


def _content_text(content: Any) -> str:
    """A tool result's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else json.dumps(content)


class FakeModelServer(ABC):
    """A threaded HTTP server on 127.0.0.1 and a free port; use as a context manager."""

    def __init__(self, rules: Iterable[Rule] = (), default: Reply = Text("Nothing to do.")):
        self.rules = list(rules)
        self.default = default
        self.requests: list[RecordedRequest] = []
        self.stalled = threading.Event()  # a Stall reply has sent its first bytes
        self._release = threading.Event()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._ids = 0
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # --- lifecycle ----------------------------------------------------------------

    def start(self) -> FakeModelServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def release(self) -> None:
        """Let every stalled stream (and any later one) finish."""
        self._release.set()

    def model_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.prompt is not None and not r.auxiliary]

    def next_id(self, prefix: str) -> str:
        with self._lock:
            self._ids += 1
            return f"{prefix}_{self._ids:04d}"

    # --- what a subclass provides -------------------------------------------------

    @abstractmethod
    def is_model_call(self, method: str, path: str) -> bool: ...

    @abstractmethod
    def conversation(self, body: dict[str, Any]) -> tuple[str | None, int, bool]:
        """``(latest user prompt, tool results since it, auxiliary?)`` of a request."""

    @abstractmethod
    def stream(self, reply: Reply, body: dict[str, Any]) -> Iterator[bytes]:
        """The SSE bytes of a reply; a ``Stall`` yields ``b""`` where it must wait."""

    def other(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        return 404, {"error": {"message": f"no route {method} {path}", "type": "not_found"}}

    # --- dispatch -----------------------------------------------------------------

    def choose(self, prompt: str | None, step: int) -> Reply:
        for rule in self.rules:
            if prompt is not None and rule.match in prompt:
                if step < len(rule.replies):
                    return rule.replies[step]
                return Text(f"Finished ({rule.match}).")
        return self.default

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            body = {"_raw": raw.decode(errors="replace")}
        path = urlsplit(handler.path).path
        record = RecordedRequest(
            method=handler.command,
            path=handler.path,
            body=body if isinstance(body, dict) else {"_json": body},
            headers={k.lower(): v for k, v in handler.headers.items()},
        )
        with self._lock:
            self.requests.append(record)
        if not self.is_model_call(handler.command, path):
            status, payload = self.other(handler.command, path)
            data = json.dumps(payload).encode()
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        prompt, step, auxiliary = self.conversation(record.body)
        reply = Text("ok") if auxiliary else self.choose(prompt, step)
        record.prompt, record.step, record.auxiliary, record.reply = prompt, step, auxiliary, reply
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.flush()
        try:
            for chunk in self.stream(reply, record.body):
                if chunk:
                    handler.wfile.write(chunk)
                    handler.wfile.flush()
                    continue
                self.stalled.set()  # a stall point: hold the stream open until released
                while not self._release.wait(0.1):
                    if self._closing.is_set():
                        return
        except (BrokenPipeError, ConnectionResetError):
            return  # the CLI went away (killed): nothing to finish

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                server._handle(self)
                self.close_connection = True

            def do_GET(self) -> None:
                server._handle(self)
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the request log is on the server object

        return Handler


def sse(event: str | None, data: dict[str, Any]) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()
