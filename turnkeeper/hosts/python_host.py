"""Host kind ``python``: run ``module:function`` in a child Python process.

The callable gets the :class:`~turnkeeper.hosts.base.TurnRequest` and an
``emit(kind, data)`` function and returns the result dict (or None, for ``{}``):
the same result, validated the same way at the receipt, as a command's ``result``
event (docs/agents.md). Since a result is always reported, the command hosts'
completion rule never applies here: ``todo_done`` says whether the todo is done. It runs in a
subprocess (``python -m turnkeeper.hosts.python_runner module:function``) rather
than in the control plane so that it can be killed, timed out, found by marker and
accounted for exactly like an agent CLI: the subprocess host machinery does all that.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from turnkeeper.hosts.base import TurnRequest
from turnkeeper.hosts.launch import PassedName
from turnkeeper.hosts.subprocess_config import SubprocessHostConfig, validate_config
from turnkeeper.hosts.subprocess_host import SubprocessRun, spawn
from turnkeeper.json_types import JsonDict

# The directory that holds the ``turnkeeper`` package: put first on the child's
# PYTHONPATH so the child runs the same turnkeeper code as the control plane, even
# from a source checkout that is not installed.
_SOURCE_ROOT = str(Path(__file__).resolve().parents[2])


def python_env(extra_paths: list[str] | None = None) -> dict[str, str]:
    paths = [*(extra_paths or []), _SOURCE_ROOT]
    if inherited := os.environ.get("PYTHONPATH"):
        paths.append(inherited)
    # Unbuffered: an event printed just before a SIGKILL must still reach us.
    return {"PYTHONPATH": os.pathsep.join(paths), "PYTHONUNBUFFERED": "1"}


class PythonHostConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    callable: str = Field(pattern=r"^[\w.]+:[\w.]+$")
    python: str = Field(default_factory=lambda: sys.executable)
    pythonpath: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # As a plain command's: the core of run's environment plus these (hosts/launch.py).
    pass_env: list[PassedName] = Field(default_factory=list, max_length=256)
    kill_stragglers: bool = True


class PythonHost:
    kind = "python"

    def __init__(self, config: Mapping[str, object] | None = None) -> None:
        self._config = dict(config or {})
        validate_config(PythonHostConfig, self._config)

    def start(self, request: TurnRequest) -> SubprocessRun:
        cfg: PythonHostConfig = validate_config(PythonHostConfig, self._config, request.host_config)
        sub = SubprocessHostConfig(
            command=[cfg.python, "-m", "turnkeeper.hosts.python_runner", cfg.callable],
            event_format="jsonl",
            stdin="request",
            env={**python_env(cfg.pythonpath), **cfg.env},
            pass_env=cfg.pass_env,
            kill_stragglers=cfg.kill_stragglers,
        )
        payload: JsonDict = {
            "request": request.for_host(),
            "config": cfg.model_dump(mode="json"),
        }
        return spawn(request, sub, stdin_request=payload)
