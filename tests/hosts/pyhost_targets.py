"""Callables for the python host tests; imported in the child by ``module:function``."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

from turnkeeper.hosts import TurnRequest

Emit = Callable[[str, dict[str, Any]], None]


def works(request: TurnRequest, emit: Emit) -> dict[str, Any]:
    print("a stray print must not corrupt the event stream")
    subprocess.run(["echo", "nor may a child's output"], check=True)
    emit("message", {"text": f"working on {request.instructions}"})
    emit("session.bound", {"handle": f"py-{request.session_id}"})
    return {"summary": "ok", "attempt": request.attempt}


def raises(request: TurnRequest, emit: Emit) -> dict[str, Any]:
    emit("message", {"text": "about to fail"})
    raise RuntimeError("agent blew up")


def returns_list(request: TurnRequest, emit: Emit) -> Any:
    return [1, 2]
