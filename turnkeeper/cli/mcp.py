"""``turnkeeper mcp``: a turn's turnkeeper tools, served to its agent over MCP (stdio)."""

from __future__ import annotations

import os

from turnkeeper.cli.context import handles_errors


@handles_errors
def mcp_server() -> None:
    """Serve a turn's turnkeeper tools to its agent over MCP on stdin/stdout.

    An agent CLI starts this for one turn, as the turn's request names it (its
    `tools`): the agent then calls brief, goal, record_evidence, todo_done, add_todo,
    open_gate and the other tools, and each answers with what turnkeeper would decide
    now. Nothing is applied before the turn ends.

    Two variables bind it to the turn, both set by turnkeeper when the turn starts:

    \b
      TURNKEEPER_TOOLS_DIR    the turn's tool channel folder
      TURNKEEPER_TOOLS_TOKEN  the turn's capability (only its sha256 is stored)

    Without them, with another turn's token, or after the turn has ended, every call
    is refused (PERMISSION_DENIED) and nothing is written.
    """
    # The SDK is imported here, when the command runs: `turnkeeper --help` never pays for it.
    from turnkeeper.tools.server import serve

    serve(os.environ)
