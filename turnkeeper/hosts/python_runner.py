"""Child side of the ``python`` host: ``python -m turnkeeper.hosts.python_runner mod:fn``.

Reads ``{"request": ...}`` JSON on stdin, calls ``fn(request, emit)`` and prints
jsonl events on stdout, ending with a ``result`` event (or a fatal ``error``). The
result's fields are checked by the control plane, at the receipt, not here: one
model (runtime/turn/agent_result.py) for every host.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import TextIO, cast

from turnkeeper.hosts.base import Emit, TurnRequest
from turnkeeper.json_types import JsonDict

# The ``module:function`` named in the host config: user code, whose signature is
# only known by calling it (a non-callable raises there, as a failed turn).
TurnFunction = Callable[[TurnRequest, Emit], object]


def _event_channel() -> TextIO:
    # Keep the real stdout for events only: a print() in user code, or a child
    # process it starts, writes to fd 1, which from here on is stderr. The dup'd fd
    # is not inheritable, so no grandchild can hold the event pipe open either.
    events_fd = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(events_fd, "w", buffering=1, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    channel = _event_channel()
    lock = threading.Lock()

    def emit(kind: str, data: JsonDict) -> None:
        line = json.dumps({"kind": kind, "data": data})
        with lock:
            channel.write(line + "\n")
            channel.flush()

    def fatal(error_kind: str, message: str) -> None:
        emit("error", {"fatal": True, "error_kind": error_kind, "message": message})

    if len(args) != 1 or ":" not in args[0]:
        fatal("spawn", "usage: python -m turnkeeper.hosts.python_runner module:function")
        return 2
    module_name, _, attr = args[0].partition(":")
    try:
        target: object = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except Exception as exc:
        fatal("spawn", f"cannot load {args[0]}: {type(exc).__name__}: {exc}")
        return 2
    try:
        request = TurnRequest.model_validate(json.load(sys.stdin)["request"])
    except Exception as exc:
        fatal("protocol", f"bad turn request on stdin: {exc}")
        return 2
    try:
        result = cast(TurnFunction, target)(request, emit)
    except Exception as exc:
        traceback.print_exc()
        fatal("exit_code", f"{type(exc).__name__}: {exc}")
        return 1
    if result is not None and not isinstance(result, dict):
        fatal("protocol", f"{args[0]} returned {type(result).__name__}, not a dict")
        return 1
    emit("result", result or {})
    return 0


if __name__ == "__main__":
    sys.exit(main())
