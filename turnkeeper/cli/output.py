"""How the CLI prints: Rich for people, ``--json`` for programs, one error format."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from rich.console import Console

from turnkeeper.errors import TurnkeeperError

console = Console()
err_console = Console(stderr=True)


def to_jsonable(value: Any) -> Any:
    """Pydantic models and containers of them, as plain JSON values."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


def print_json(value: Any, *, one_line: bool = False) -> None:
    # Plain stdout, not Rich: machine output must not be wrapped or coloured.
    # ``one_line`` keeps a stream of JSON lines (``run --json``) parseable line by line.
    text = json.dumps(to_jsonable(value), indent=None if one_line else 2, sort_keys=True)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def print_error(error: TurnkeeperError, *, as_json: bool) -> None:
    if as_json:
        print_json({"error": error.to_dict()})
        return
    err_console.print(f"[bold red]{error.code.value}[/] ({error.reason}): {error.message}")
    for key, val in error.details.items():
        err_console.print(f"  [dim]{key}:[/] {val}")
