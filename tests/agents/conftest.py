"""Fixtures for the agent CLI suite: the pinned CLIs, fake model servers, projects.

The CLIs come from ``scripts/install_agent_clis.sh`` (nothing downloads here). A
machine without them skips this suite with the reason; with
``TURNKEEPER_REQUIRE_AGENT_CLIS=1`` (CI) a missing CLI fails instead.

Only processes a test started are signalled: control planes by the pid of their
``Popen``, CLIs and their commands by pid after reading a ``TURNKEEPER_SESSION_ID``
/ ``TURNKEEPER_TURN_ID`` marker (of this test's own session) from ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.agents.fakes import FakeAnthropicServer, FakeModelServer, FakeResponsesServer, Rule
from turnkeeper.hosts import TurnKind, TurnRequest, process_tree
from turnkeeper.hosts.agent_cli import cached_binary, install_cache_dir

REQUIRE_ENV = "TURNKEEPER_REQUIRE_AGENT_CLIS"
CLI_NAMES = ("codex", "claude")


# --- the pinned CLIs ------------------------------------------------------------------


def locate_cli(name: str) -> Path:
    """The pinned CLI ``name`` from the install cache; skip (or fail in CI) without it."""
    found = cached_binary(name)
    if found is not None:
        return found
    if shutil.which("node") is None:
        reason = f"Node.js is not installed, so {name} could not be installed"
    else:
        reason = (
            f"{name} is not installed in {install_cache_dir()}: run scripts/install_agent_clis.sh"
        )
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
    pytest.skip(reason)


# --- per-CLI setup ----------------------------------------------------------------------


@dataclass
class CliKit:
    """One CLI with its fake model server and a host config pointing it there."""

    name: str
    binary: Path
    server: FakeModelServer
    home: Path  # the CLI's private config dir (CODEX_HOME / CLAUDE_CONFIG_DIR)

    @property
    def kind(self) -> str:
        return self.name

    def host_config(self, **overrides: Any) -> dict[str, Any]:
        """What a user would put in ``session create --host-config`` for this machine.

        ``HOME`` is a private folder too: the CLIs run shell commands in login shells,
        and this test must neither read nor disturb the real user's shell setup.
        """
        home = {"HOME": str(self.home.parent / f"{self.name}-user")}
        Path(home["HOME"]).mkdir(exist_ok=True)
        if self.name == "codex":
            config: dict[str, Any] = {
                "binary": str(self.binary),
                "codex_home": str(self.home),
                "env": home,
                "pass_env": ["FAKE_OPENAI_KEY"],  # the provider's env_key, not OPENAI_*
            }
        else:
            config = {
                "binary": str(self.binary),
                "config_dir": str(self.home),
                "allowed_tools": ["Bash"],
                "env": {
                    "ANTHROPIC_BASE_URL": self.server.base_url,
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                    "CLAUDE_CODE_MAX_RETRIES": "0",
                    **home,
                },
            }
        config.update(overrides)
        return config


def codex_user_config(home: Path, base_url: str) -> None:
    """A user's own ``config.toml``: the model and provider live there, not in turnkeeper."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        'model = "gpt-test"\n'
        'model_provider = "fake"\n'
        "[model_providers.fake]\n"
        'name = "fake"\n'
        f'base_url = "{base_url}/v1"\n'
        'env_key = "FAKE_OPENAI_KEY"\n'
        'wire_api = "responses"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
    )


MakeKit = Callable[[str, list[Rule]], CliKit]


# The fake servers' keys, exported where ``run`` starts as a user exports theirs: a
# key in the host config is refused (it would be stored in the event log).
FAKE_KEYS = {"FAKE_OPENAI_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test"}


@pytest.fixture
def make_kit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MakeKit]:
    """``make_kit(cli, rules)``: a started fake server and the CLI configured for it."""
    servers: list[FakeModelServer] = []
    for name, value in FAKE_KEYS.items():
        monkeypatch.setenv(name, value)

    def make(name: str, rules: list[Rule]) -> CliKit:
        binary = locate_cli(name)
        server: FakeModelServer
        server = FakeResponsesServer(rules) if name == "codex" else FakeAnthropicServer(rules)
        server.start()
        servers.append(server)
        home = tmp_path / f"{name}-home"
        if name == "codex":
            codex_user_config(home, server.base_url)
        else:
            home.mkdir()
        return CliKit(name=name, binary=binary, server=server, home=home)

    yield make
    for server in servers:
        server.stop()


# --- workspaces and requests -----------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.stdout


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("a test repository\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


MakeRequest = Callable[..., TurnRequest]


@pytest.fixture
def make_request(repo: Path) -> Iterator[MakeRequest]:
    """Turn requests with unique turn ids; teardown ends whatever carries their markers."""
    used: list[str] = []

    def make(**overrides: Any) -> TurnRequest:
        fields: dict[str, Any] = {
            "turn_id": f"agent-test-{uuid.uuid4().hex[:12]}",
            "session_id": "agent-session",
            "generation": 1,
            "attempt": 1,
            "kind": TurnKind.START,
            "instructions": "Start todo t-a: write A (attempt 1).",
            "workspace": repo,
            "todo_id": "t-a",
            "todo_title": "write A",
            "timeout_seconds": 60.0,
        }
        fields.update(overrides)
        used.append(fields["turn_id"])
        return TurnRequest(**fields)

    yield make
    for turn_id in used:
        process_tree.kill_turn_processes(turn_id)


# --- processes ----------------------------------------------------------------------------


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def _alive(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return raw[raw.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X", b"x")


def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def ppid(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(raw[raw.rindex(b")") + 2 :].split()[1])


def marked(key: str, value: str) -> dict[int, dict[str, str]]:
    """Live processes whose environment has ``key=value``: pid -> their environment.
    Read straight from ``/proc``, independent of turnkeeper's own process tracking."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        env = _environ(int(name))
        if env.get(key) == value and _alive(int(name)):
            found[int(name)] = env
    return found


def kill_marked(key: str, value: str) -> None:
    """SIGKILL, by pid, whatever carries this test's own marker (teardown)."""
    for pid in marked(key, value):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)
