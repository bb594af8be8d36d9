"""Fake model servers on 127.0.0.1 that real agent CLIs talk to, offline.

Each test starts its own server on a free port. Replies are scripted by
:class:`Rule`: the rule whose ``match`` occurs in the conversation's latest user
prompt answers, with its reply number *n* where *n* is how many tool results
followed that prompt (so a resumed conversation starts again at its new prompt).
A reply is a message (:class:`Text`), a shell command (:class:`Shell`), a call of an
MCP server's tool (:class:`Tool`), or a stream that stalls or breaks;
:meth:`RecordedRequest.last_tool_output` says what the model was told a call answered.
"""

from tests.agents.fakes._server import (
    FakeModelServer,
    Malformed,
    RecordedRequest,
    Reply,
    Rule,
    Shell,
    Stall,
    Text,
    Tool,
)
from tests.agents.fakes.anthropic_messages import FakeAnthropicServer
from tests.agents.fakes.openai_responses import FakeResponsesServer

__all__ = [
    "FakeAnthropicServer",
    "FakeModelServer",
    "FakeResponsesServer",
    "Malformed",
    "RecordedRequest",
    "Reply",
    "Rule",
    "Shell",
    "Stall",
    "Text",
    "Tool",
]
