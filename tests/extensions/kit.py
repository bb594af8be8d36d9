"""What the extension tests build: plugin distributions on a path of their own, fake
agent CLIs on a PATH of their own, and an environment with no key and no login.

A plugin here is what ``pip install`` leaves behind: a module and a ``*.dist-info``
folder whose ``entry_points.txt`` declares it, reached through PYTHONPATH, so the real
``turnkeeper`` command finds it through ``importlib.metadata`` as any installed package.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from tests.usage.project import COMMAND_TIMEOUT, GIT_IDENTITY, Completed, turnkeeper_executable

# What a user's shell might hold that would change what doctor finds.
_KEY_VARIABLES = (
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "CODEX_HOME",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "XDG_CACHE_HOME",
    "PYTHONPATH",
)


def write_plugin(
    root: Path,
    name: str,
    version: str,
    entry_points: dict[str, dict[str, str]],
    modules: dict[str, str],
) -> Path:
    """An installed-looking distribution ``name`` under ``root`` (returned, for PYTHONPATH)."""
    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob(f"{name}-*.dist-info"):  # an upgrade replaces the old metadata
        for file in old.iterdir():
            file.unlink()
        old.rmdir()
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = []
    for group, points in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{ep} = {target}" for ep, target in points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(source)
    return root


def fake_cli(bin_dir: Path, name: str, script: str) -> Path:
    """An executable ``name`` in ``bin_dir`` running the shell ``script``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def clean_env(home: Path, path_dirs: list[Path], **extra: str) -> dict[str, str]:
    """The user's environment without any key, login, plugin path or turnkeeper setting:
    HOME is ``home`` (no login file) and PATH is ``path_dirs`` then the system's own."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TURNKEEPER_") and k not in _KEY_VARIABLES
    }
    home.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    env["XDG_CACHE_HOME"] = str(home / ".cache")  # no install cache of the pinned CLIs
    env["PATH"] = os.pathsep.join([*map(str, path_dirs), "/usr/bin", "/bin"])
    env.update(GIT_IDENTITY)
    env.update(extra)
    return env


def turnkeeper(*args: str, cwd: Path, env: dict[str, str]) -> Completed:
    """The real ``turnkeeper`` command, run in ``cwd`` with exactly ``env``."""
    proc = subprocess.run(
        [*turnkeeper_executable(), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    return Completed(args=args, returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)
