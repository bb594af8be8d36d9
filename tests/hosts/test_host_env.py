"""What of the environment ``run`` started in a host process gets (hosts/launch.py):
the core, what its config names, all of it on request — never turnkeeper's own
credentials — checked on the environment of a real process."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.conftest import MakeRequest
from turnkeeper.hosts.base import TurnRequest
from turnkeeper.hosts.launch import process_env
from turnkeeper.hosts.subprocess_host import SubprocessHost

PRINT_ENV = "import json, os; print(json.dumps(dict(os.environ)))"
INHERITED = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/dev",
    "LC_ALL": "C.UTF-8",
    "HTTPS_PROXY": "http://proxy:3128",
    "MYAPP_MODE": "test",
    "MYAPP_LEVEL": "3",
    "OPENAI_API_KEY": "exported for the agent",
    "AWS_SECRET_ACCESS_KEY": "exported for something else",
    "TURNKEEPER_DATABASE_URL": "postgresql://tk:pw@db/tk",
    "PGPASSWORD": "pw",
}


def _env_of(make_request: MakeRequest, workspace: Path, **config: Any) -> dict[str, str]:
    host = SubprocessHost({"command": [sys.executable, "-c", PRINT_ENV], **config})
    run = host.start(make_request(inherited_env=INHERITED))
    lines = [e.data.get("text", "") for e in run.events()]
    assert run.wait(30).status.value == "succeeded"
    return dict(json.loads("".join(str(line) for line in lines)))


def test_the_core_and_named_variables_pass_the_rest_does_not(
    make_request: MakeRequest, workspace: Path
) -> None:
    env = _env_of(make_request, workspace, pass_env=["OPENAI_API_KEY", "MYAPP_*", "PGPASSWORD"])
    for name in ("PATH", "HOME", "LC_ALL", "HTTPS_PROXY", "OPENAI_API_KEY"):
        assert env[name] == INHERITED[name], name
    assert env["MYAPP_MODE"] == "test" and env["MYAPP_LEVEL"] == "3"  # a prefix
    assert "AWS_SECRET_ACCESS_KEY" not in env  # named by nobody
    assert "PGPASSWORD" not in env and "TURNKEEPER_DATABASE_URL" not in env  # never
    assert env["TURNKEEPER_SESSION_ID"] == "sess-1"  # the turn's own markers


def test_nothing_named_gives_the_core_only(make_request: MakeRequest, workspace: Path) -> None:
    env = _env_of(make_request, workspace)
    assert "OPENAI_API_KEY" not in env and "MYAPP_MODE" not in env
    assert env["PATH"] == INHERITED["PATH"]


def test_inherit_env_passes_everything_but_the_control_planes_credentials(
    make_request: MakeRequest, workspace: Path
) -> None:
    env = _env_of(make_request, workspace, inherit_env=True, env={"EXTRA": "1"})
    assert env["AWS_SECRET_ACCESS_KEY"] == INHERITED["AWS_SECRET_ACCESS_KEY"]
    assert env["EXTRA"] == "1"
    assert "PGPASSWORD" not in env and "TURNKEEPER_DATABASE_URL" not in env


class _ReadsRecorded(dict[str, str]):
    """An environment that records which values were read."""

    def __init__(self, values: dict[str, str]) -> None:
        super().__init__(values)
        self.read: list[str] = []

    def __getitem__(self, name: str) -> str:
        self.read.append(name)
        return super().__getitem__(name)

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        self.read.append(name)
        return super().get(name, default)


def test_only_the_values_passed_on_are_read(
    make_request: MakeRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # os.environ decodes a value each time one is read, and every turn filters the
    # whole environment: the names decide, and only what passes is read.
    environ = _ReadsRecorded(INHERITED)
    monkeypatch.setattr(os, "environ", environ)
    env = process_env(make_request(), {}, inherit_env=False, pass_env=["MYAPP_*"])
    passed = {"PATH", "HOME", "LC_ALL", "HTTPS_PROXY", "MYAPP_MODE", "MYAPP_LEVEL"}
    assert sorted(environ.read) == sorted(passed)
    assert {k: env[k] for k in passed} == {k: INHERITED[k] for k in passed}
    assert "OPENAI_API_KEY" not in env and "PGPASSWORD" not in env


def test_a_changed_environment_or_config_is_never_served_from_the_cache(
    make_request: MakeRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What passes is remembered per source and config (hosts/launch.py): a variable set
    # or unset since, another config or another runner environment is filtered afresh.
    request = make_request()

    def passed(request: TurnRequest = request, **config: Any) -> dict[str, str]:
        config = {"inherit_env": False, "pass_env": ["MYAPP_*"], **config}
        return process_env(request, {}, **config)

    monkeypatch.setenv("MYAPP_MODE", "one")
    monkeypatch.setenv("OTHER_VAR", "x")
    assert passed()["MYAPP_MODE"] == "one"
    assert passed()["MYAPP_MODE"] == "one"  # served again
    monkeypatch.setenv("MYAPP_MODE", "two")
    assert passed()["MYAPP_MODE"] == "two"
    monkeypatch.delenv("MYAPP_MODE")
    assert "MYAPP_MODE" not in passed()
    monkeypatch.setenv("MYAPP_MODE", "three")
    assert "MYAPP_MODE" not in passed(pass_env=[])
    assert passed(inherit_env=True)["OTHER_VAR"] == "x"
    assert "OTHER_VAR" not in passed()
    runner_env = dict(INHERITED)
    assert passed(make_request(inherited_env=runner_env))["MYAPP_MODE"] == "test"
    runner_env["MYAPP_MODE"] = "changed"
    assert passed(make_request(inherited_env=runner_env))["MYAPP_MODE"] == "changed"
    assert passed()["MYAPP_MODE"] == "three"  # this process's own, not the runner's
