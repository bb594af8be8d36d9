"""Effect provider ``command``: apply and readback are commands with ``{key}`` substituted.

Config::

    {"apply": "deploy --id {key}",          # a shell string, or an argv list
     "readback": ["deploy-status", "{key}"],
     "cwd": "/srv/app",                      # default: the control plane's cwd
     "env": {"STAGE": "prod"},               # added to the environment
     "timeout_seconds": 60}

Both commands get the request as JSON on stdin and in ``TURNKEEPER_EFFECT_REQUEST``,
and the key in ``TURNKEEPER_EFFECT_KEY``. Readback: exit 0 -> applied (stdout, JSON
if it is JSON, is the observed value); exit 1 -> not_applied; any other exit, a
signal or a timeout -> unknown. A shell string substitutes the key as it is: keys
are ``[A-Za-z0-9-]``, so they need no quoting.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from turnkeeper.effects._util import decode_output, substitute, validate_config
from turnkeeper.effects.base import ApplyResult, Readback, Request
from turnkeeper.errors import InvalidArgument

Command = str | list[str]


class CommandProviderConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    apply: Command
    readback: Command
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: float = Field(default=60.0, gt=0, le=3600)


class CommandProvider:
    kind = "command"

    def __init__(self, config: Mapping[str, object] | None = None) -> None:
        self.config = validate_config(CommandProviderConfig, self.kind, dict(config or {}))
        for command in (self.config.apply, self.config.readback):
            if not command:
                raise InvalidArgument("an effect command is empty", reason="invalid_effect_config")

    def apply(self, key: str, request: Request) -> ApplyResult:
        outcome = self._run(self.config.apply, key, request)
        if isinstance(outcome, str):
            return ApplyResult(accepted=False, detail=outcome)
        code, out = outcome
        return ApplyResult(accepted=code == 0, value=out, detail=f"exit {code}")

    def readback(self, key: str, request: Request) -> Readback:
        outcome = self._run(self.config.readback, key, request)
        if isinstance(outcome, str):
            return Readback.unknown(outcome)
        code, out = outcome
        if code == 0:
            return Readback.applied(out, "exit 0")
        if code == 1:
            return Readback.not_applied("exit 1")
        return Readback.unknown(f"exit {code}")

    def _run(self, command: Command, key: str, request: Request) -> tuple[int, JsonValue] | str:
        """(exit code, decoded stdout), or why the command gave no exit code."""
        payload = json.dumps(dict(request))
        env = {
            **os.environ,
            **self.config.env,
            "TURNKEEPER_EFFECT_KEY": key,
            "TURNKEEPER_EFFECT_REQUEST": payload,
        }
        args: str | list[str]
        if isinstance(command, str):
            args = substitute(command, key)
        else:
            args = [substitute(part, key) for part in command]
        try:
            proc = subprocess.run(
                args,
                shell=isinstance(args, str),
                input=payload.encode(),
                capture_output=True,
                cwd=self.config.cwd,
                env=env,
                timeout=self.config.timeout_seconds,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"timed out after {self.config.timeout_seconds}s"
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}"[:500]
        if proc.returncode < 0:
            return f"killed by signal {-proc.returncode}"
        return proc.returncode, decode_output(proc.stdout)
