"""An agent CLI's private directory inside the workspace stays out of git.

As a user has it: ``turnkeeper init`` in a git repository, then Codex and Claude
sessions whose ``codex_home`` / ``config_dir`` live in the repository (a per-project
login, say). Their transcripts are not offered to git — ``git status`` does not list
them, ``git add -A`` does not stage them (so no snapshot captures them) — and the
user's own ``.gitignore`` is left as it was.
"""

from __future__ import annotations

import subprocess

from tests.usage.project import UserProject

# ``session create`` checks the CLI is ready (found, its version, a key): stand-ins that
# answer ``--version`` as the pinned CLIs do, and keys exported as a user would.
VERSIONS = {"codex": "codex-cli 0.171.0", "claude": "2.1.197 (Claude Code)"}
KEYS = {"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test"}


def test_codex_and_claude_homes_in_the_workspace_are_ignored(user_project: UserProject) -> None:
    root = user_project.root
    gitignore = (root / ".gitignore").read_text()
    goal = user_project.tk("goal", "add", "Work", "-c", "done", "-q").stdout.strip()
    homes = {"codex": ("codex_home", ".agents/codex"), "claude": ("config_dir", "./.claude-work")}
    binaries = {
        kind: str(user_project.agent(kind, f'#!/bin/sh\necho "{version}"\n'))
        for kind, version in VERSIONS.items()
    }
    for kind, (field, home) in homes.items():
        config = user_project.host_config(kind, {field: home, "binary": binaries[kind]})
        user_project.tk(
            "session", "create", goal, "--host", kind, "--host-config", config, env=KEYS
        )
        transcript = root / home / "sessions" / "rollout-1.jsonl"
        transcript.parent.mkdir(parents=True)
        transcript.write_text('{"type": "user", "message": "a transcript"}\n')
    # A retried create adds nothing twice.
    again = {"codex_home": ".agents/codex", "binary": binaries["codex"]}
    config = user_project.host_config("codex-again", again)
    user_project.tk("session", "create", goal, "--host", "codex", "--host-config", config, env=KEYS)

    status = user_project.git("status", "--porcelain", "--untracked-files=all")
    assert ".agents" not in status and ".claude-work" not in status, status
    subprocess.run(["git", "add", "-A"], cwd=root, check=True, timeout=60)
    staged = user_project.git("diff", "--cached", "--name-only")
    assert "rollout-1.jsonl" not in staged, staged
    exclude = (root / ".git" / "info" / "exclude").read_text()
    assert exclude.count("/.agents/codex/") == 1 and exclude.count("/.claude-work/") == 1
    assert (root / ".gitignore").read_text() == gitignore  # the user's file untouched
