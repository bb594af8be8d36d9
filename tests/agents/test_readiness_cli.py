"""The pinned Codex CLI with no key is refused at ``session create``, with the doctor's fix.

The real binary (found, of the pinned version), a Codex home of its own with no login,
and an environment with no OpenAI key: ``turnkeeper session create --host codex`` in a
project made by ``turnkeeper init`` is refused FAILED_PRECONDITION ``host_not_ready``
(exit 6), naming the finding and the fix, and writes nothing. The same config with a
key exported is created.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.agents.conftest import locate_cli
from tests.usage.project import UserProject

FIX = "set OPENAI_API_KEY (or CODEX_API_KEY) or run `codex login`"


def test_the_real_codex_without_a_key_is_refused_at_create(tmp_path: Path) -> None:
    binary = locate_cli("codex")
    project = UserProject(tmp_path / "work")
    project.tk("goal", "add", "Fix the parser", "--id", "parser")
    home = tmp_path / "codex-home"
    home.mkdir()
    config = project.host_config("codex", {"binary": str(binary), "codex_home": str(home)})
    # No key (an empty value is unset to the checks, as to the CLI), and a HOME with
    # no login file of the real user's either.
    env = {"OPENAI_API_KEY": "", "CODEX_API_KEY": "", "HOME": str(tmp_path)}
    before = project.durable_digest()

    refused = project.tk(
        "session", "create", "parser", "--host", "codex", "--host-config", config,
        "--workspace", ".", "--json", expect=6, env=env,
    )  # fmt: skip
    error = json.loads(refused.stdout)["error"]
    assert (error["code"], error["reason"]) == ("FAILED_PRECONDITION", "host_not_ready"), error
    assert FIX in error["message"], error
    assert project.durable_digest() == before

    created = project.tk(
        "session", "create", "parser", "--host", "codex", "--host-config", config,
        "--workspace", ".", "--json", env={**env, "OPENAI_API_KEY": "sk-test"},
    )  # fmt: skip
    assert json.loads(created.stdout)["host_kind"] == "codex"
