"""A fake Anthropic Messages API (``POST /v1/messages?beta=true``, SSE) for Claude Code."""

from __future__ import annotations

import json
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

REMINDER = "<system-reminder>"


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


class FakeAnthropicServer(FakeModelServer):
    def is_model_call(self, method: str, path: str) -> bool:
        return method == "POST" and path.rstrip("/").endswith("/messages")

    def other(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        if path.rstrip("/").endswith("/count_tokens"):
            return 200, {"input_tokens": 100}
        return super().other(method, path)

    def conversation(self, body: dict[str, Any]) -> tuple[str | None, int, bool]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not body.get("tools"):
            return None, 0, True  # side requests (titles, quota probes) carry no tools
        prompt, at = None, -1
        for n, message in enumerate(messages):
            if not isinstance(message, dict) or message.get("role") != "user":
                continue
            blocks = _blocks(message)
            if any(b.get("type") == "tool_result" for b in blocks):
                continue
            texts = [
                str(b.get("text", "")).strip()
                for b in blocks
                if b.get("type") == "text" and not str(b.get("text", "")).lstrip().startswith("<")
            ]
            text = "\n".join(t for t in texts if t)
            if text:
                prompt, at = text, n
        if prompt is None:
            return None, 0, True
        step = sum(
            1
            for message in messages[at + 1 :]
            if isinstance(message, dict) and message.get("role") == "user"
            for b in _blocks(message)
            if b.get("type") == "tool_result"
        )
        return prompt, step, False

    def stream(self, reply: Reply, body: dict[str, Any]) -> Iterator[bytes]:
        mid = self.next_id("msg")
        usage = {
            "input_tokens": 120,
            "output_tokens": 1,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        message = {
            "id": mid,
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude-fake"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        yield sse("message_start", {"type": "message_start", "message": message})
        if isinstance(reply, Stall):
            yield sse("ping", {"type": "ping"})
            yield b""
            reply = reply.then
        if isinstance(reply, Malformed):
            yield f"event: content_block_start\ndata: {reply.garbage}\n\n".encode()
            yield b"event: content_block_delta\ndata: [1, 2\n\n"
            return  # and no message_stop
        if isinstance(reply, Text):
            block: dict[str, Any] = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": reply.text}
            stop_reason = "end_turn"
        elif isinstance(reply, Tool):
            # An MCP tool goes by its full name: mcp__<server>__<tool>.
            name = f"mcp__{reply.server}__{reply.name}"
            block = {"type": "tool_use", "id": self.next_id("toolu"), "name": name, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(reply.arguments)}
            stop_reason = "tool_use"
        else:
            assert isinstance(reply, Shell)
            block = {"type": "tool_use", "id": self.next_id("toolu"), "name": "Bash", "input": {}}
            partial = json.dumps({"command": reply.command, "description": reply.description})
            delta = {"type": "input_json_delta", "partial_json": partial}
            stop_reason = "tool_use"
        yield sse(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        )
        yield sse(
            "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
        )
        yield sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        yield sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": 12},
            },
        )
        yield sse("message_stop", {"type": "message_stop"})
