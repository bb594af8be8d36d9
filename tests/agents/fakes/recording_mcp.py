"""A small stdio MCP server that records its calls: the agent CLIs' side of the wiring.

Run as ``python recording_mcp.py LOG [DELAY]``: after ``DELAY`` seconds (a slow
start, as a server importing much on a busy machine has) it offers the tools ``todo_done`` (answers
``"recorded: <summary>"``) and ``refuse`` (always fails: ``"refused: <reason>"``)
and appends one JSON line per call to ``LOG``: the tool, its arguments, and the
turnkeeper variables of the environment the CLI started it with (``env``), plus the
names of every variable it saw (``env_names``). The real tool server is
``turnkeeper mcp``; this one tests only how a host hands a server to a CLI.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

SERVER = "turnkeeper"
WATCHED_ENV = (
    "TURNKEEPER_TOOLS_DIR",
    "TURNKEEPER_TOOLS_TOKEN",
    "TURNKEEPER_TURN_ID",
    "TURNKEEPER_SESSION_ID",
)

app = MCPServer(SERVER, instructions="Recording tools for the wiring tests.")


def _record(tool: str, arguments: dict[str, str]) -> None:
    line = {
        "tool": tool,
        "arguments": arguments,
        "env": {name: os.environ[name] for name in WATCHED_ENV if name in os.environ},
        "env_names": sorted(os.environ),
    }
    with Path(sys.argv[1]).open("a") as log:
        log.write(json.dumps(line) + "\n")


@app.tool()
def todo_done(summary: str) -> str:
    """Report the turn's todo done."""
    _record("todo_done", {"summary": summary})
    return f"recorded: {summary}"


@app.tool()
def refuse(reason: str) -> str:
    """Always refused (a tool error)."""
    _record("refuse", {"reason": reason})
    # ToolError: an anticipated failure, whose text the model reads (any other
    # exception reaches it only as "Error executing tool refuse").
    raise ToolError(f"refused: {reason}")


def read_calls(log: Path) -> list[dict[str, Any]]:
    """The calls the server recorded (none if it never ran)."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


if __name__ == "__main__":
    time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0.0)
    app.run()
