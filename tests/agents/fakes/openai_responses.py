"""A fake OpenAI Responses API (``POST /v1/responses``, SSE) for Codex CLI."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any

from tests.agents.fakes._server import (
    FakeModelServer,
    Malformed,
    Reply,
    Shell,
    Stall,
    Text,
    Tool,
    sse,
)

USAGE = {
    "input_tokens": 120,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 12,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 132,
}


def _item_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


class FakeResponsesServer(FakeModelServer):
    def is_model_call(self, method: str, path: str) -> bool:
        return method == "POST" and path.rstrip("/").endswith("/responses")

    def other(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        if method == "GET" and path.rstrip("/").endswith("/models"):
            return 200, {"object": "list", "data": []}
        return super().other(method, path)

    def conversation(self, body: dict[str, Any]) -> tuple[str | None, int, bool]:
        items = body.get("input")
        if not isinstance(items, list):
            return None, 0, True
        prompt, at = None, -1
        for n, item in enumerate(items):
            if not isinstance(item, dict) or item.get("role") != "user":
                continue
            text = _item_text(item).strip()
            # Codex injects context (environment, AGENTS.md, ...) as XML-ish user items.
            if text and not text.startswith("<") and not text.startswith("# AGENTS.md"):
                prompt, at = text, n
        if prompt is None:
            return None, 0, True
        waiting = _waiting_calls(items[at + 1 :])
        step = sum(
            1
            for item in items[at + 1 :]
            if isinstance(item, dict)
            and item.get("type") == "function_call_output"
            and not (item.get("call_id") in waiting and _still_running(item) is not None)
        )
        return prompt, step, False

    def stream(self, reply: Reply, body: dict[str, Any]) -> Iterator[bytes]:
        rid = self.next_id("resp")
        yield sse(
            "response.created",
            {"type": "response.created", "response": {"id": rid, "status": "in_progress"}},
        )
        if isinstance(reply, Stall):
            yield b""
            reply = reply.then
        if isinstance(reply, Malformed):
            yield f"event: response.output_item.done\ndata: {reply.garbage}\n\n".encode()
            yield b"data: [garbage without an event]\n\n"
            return  # and no response.completed
        if isinstance(reply, Text):
            item: dict[str, Any] = {
                "type": "message",
                "role": "assistant",
                "id": self.next_id("msg"),
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        elif isinstance(reply, Tool):
            # An MCP tool: a function call in the server's namespace (Codex refuses the
            # flat name ``mcp__<server>__<tool>`` as an unsupported call).
            item = {
                "type": "function_call",
                "id": self.next_id("fc"),
                "call_id": self.next_id("call"),
                "namespace": f"mcp__{reply.server}",
                "name": reply.name,
                "arguments": json.dumps(reply.arguments),
                "status": "completed",
            }
        else:
            assert isinstance(reply, Shell)
            name, arguments = _shell_call(reply, body)
            item = {
                "type": "function_call",
                "id": self.next_id("fc"),
                "call_id": self.next_id("call"),
                "name": name,
                "arguments": json.dumps(arguments),
                "status": "completed",
            }
        yield sse(
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": item,
            },
        )
        yield sse(
            "response.output_item.done",
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": item,
            },
        )
        yield sse(
            "response.completed",
            {
                "type": "response.completed",
                "response": {"id": rid, "status": "completed", "usage": USAGE},
            },
        )


# A waiting Shell's calls ask Codex to wait this long (its maximum) before answering.
WAIT_MS = 30_000
_RUNNING = re.compile(r"Process running with session ID (\d+)")


def _shell_call(reply: Shell, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The call a Shell reply makes: the command, or (waiting for it) a poll of the
    command the previous call left running."""
    if not reply.wait:
        return "exec_command", {"cmd": reply.command}
    items = body.get("input")
    last = items[-1] if isinstance(items, list) and items else None
    running = _still_running(last) if isinstance(last, dict) else None
    if running is not None and last is not None and last.get("type") == "function_call_output":
        return "write_stdin", {"session_id": running, "chars": "", "yield_time_ms": WAIT_MS}
    return "exec_command", {"cmd": reply.command, "yield_time_ms": WAIT_MS}


def _waiting_calls(items: list[Any]) -> set[str]:
    """Call ids of the calls a waiting Shell made (they carry ``yield_time_ms``)."""
    out = set()
    for item in items:
        if isinstance(item, dict) and item.get("type") == "function_call":
            with contextlib.suppress(ValueError, TypeError):
                if "yield_time_ms" in json.loads(item.get("arguments") or "{}"):
                    out.add(str(item.get("call_id")))
    return out


def _still_running(item: dict[str, Any]) -> int | None:
    """The session id of a command a tool output says is still running, else None."""
    output = item.get("output")
    text = output if isinstance(output, str) else json.dumps(output)
    found = _RUNNING.search(text)
    return int(found.group(1)) if found else None
