"""Whether the Codex CLI and Claude Code can run a turn here: the binary the host would
run, the version it reports against the version turnkeeper is tested with, and a key
or login it can use.

The binary is found exactly as the host finds it (:func:`resolve_binary`: the host
config's ``binary``, else the name on PATH, else the install cache of
``scripts/install_agent_clis.sh``). A key is only ever reported as set and where
from — never its value.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from turnkeeper.errors import TurnkeeperError
from turnkeeper.extensions.catalog import one_line
from turnkeeper.extensions.findings import Finding
from turnkeeper.hosts.agent_cli import (
    CLAUDE_CODE_VERSION,
    CODEX_VERSION,
    AgentCliConfig,
    install_cache_dir,
    resolve_binary,
)
from turnkeeper.hosts.claude import ClaudeHostConfig, config_dir
from turnkeeper.hosts.codex import CodexHostConfig, codex_home
from turnkeeper.json_types import JsonDict, json_object

VERSION_TIMEOUT_SECONDS = 5.0
_VERSION = re.compile(r"\b(\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?)\b")
# Codex providers that run locally and take no key (Codex's own built-ins).
_KEYLESS_CODEX_PROVIDERS = frozenset({"oss", "ollama", "lmstudio"})


@dataclass(frozen=True)
class AgentCli:
    """One agent CLI as the doctor knows it."""

    kind: str  # the host kind, and the command's name on PATH
    npm_package: str
    tested_version: str
    config_model: type[AgentCliConfig]
    key_variables: tuple[str, ...]
    login_hint: str
    # Other places a usable credential may be, as descriptions (empty: none found);
    # called with a config of ``config_model`` (each function narrows to its own).
    other_credentials: Callable[[AgentCliConfig], list[str]]
    # Extra environment for ``--version`` (e.g. no self-update while it runs).
    version_env: tuple[tuple[str, str], ...] = ()

    @property
    def install(self) -> str:
        return (
            f"npm install -g {self.npm_package}@{self.tested_version} "
            "(or scripts/install_agent_clis.sh)"
        )


def _env_value(cfg: AgentCliConfig, name: str) -> tuple[str, str] | None:
    """Where variable ``name`` is set for the CLI (config ``env`` over the environment)."""
    if cfg.env.get(name):
        return name, "the host config's env"
    if os.environ.get(name):
        return name, "the environment"
    return None


def _codex_credentials(cfg: AgentCliConfig) -> list[str]:
    assert isinstance(cfg, CodexHostConfig)  # validated with CODEX.config_model
    home = codex_home(cfg)
    found: list[str] = []
    auth = home / "auth.json"  # written by `codex login`
    if auth.is_file():
        found.append(f"login file {auth}")
    provider_key = _codex_provider_key(cfg, home)
    if provider_key is not None:
        found.append(provider_key)
    return found


def _codex_provider_key(cfg: CodexHostConfig, home: Path) -> str | None:
    """A model provider other than OpenAI names its own key variable (``env_key``) in
    config.toml, or needs none (a local one): what Codex itself would use."""
    try:
        user = tomllib.loads((home / "config.toml").read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        user = {}
    provider = cfg.config.get("model_provider", user.get("model_provider"))
    if not isinstance(provider, str) or provider == "openai":
        return None
    if provider in _KEYLESS_CODEX_PROVIDERS:
        return f"model provider {provider!r} needs no key"
    table = user.get("model_providers")
    spec = table.get(provider) if isinstance(table, dict) else None
    if not isinstance(spec, dict):
        return None
    env_key = spec.get("env_key")
    if not isinstance(env_key, str) or not env_key:
        return f"model provider {provider!r} (config.toml) needs no key"
    where = _env_value(cfg, env_key)
    if where is None:
        return None
    return f"{env_key} is set in {where[1]} (model provider {provider!r} in config.toml)"


def _claude_credentials(cfg: AgentCliConfig) -> list[str]:
    assert isinstance(cfg, ClaudeHostConfig)  # validated with CLAUDE.config_model
    found: list[str] = []
    home = config_dir(cfg)
    credentials = home / ".credentials.json"  # written by logging in (/login)
    if credentials.is_file():
        found.append(f"login file {credentials}")
    for variable, cloud in (
        ("CLAUDE_CODE_USE_BEDROCK", "Amazon Bedrock"),
        ("CLAUDE_CODE_USE_VERTEX", "Google Vertex AI"),
    ):
        if _env_value(cfg, variable) is not None:
            found.append(f"{variable} is set: {cloud}'s own credentials are used")
    try:
        settings = json_file(home / "settings.json")
    except ValueError:
        settings = {}
    if settings.get("apiKeyHelper"):
        found.append(f"apiKeyHelper in {home / 'settings.json'}")
    return found


def json_file(path: Path) -> JsonDict:
    """A JSON object file; ``{}`` when it is absent, ValueError when it is not one."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(str(error)) from error
    return json_object(text)


CODEX = AgentCli(
    kind="codex",
    npm_package="@openai/codex",
    tested_version=CODEX_VERSION,
    config_model=CodexHostConfig,
    key_variables=("OPENAI_API_KEY", "CODEX_API_KEY"),
    login_hint="set OPENAI_API_KEY (or CODEX_API_KEY) or run `codex login`",
    other_credentials=_codex_credentials,
)
CLAUDE = AgentCli(
    kind="claude",
    npm_package="@anthropic-ai/claude-code",
    tested_version=CLAUDE_CODE_VERSION,
    config_model=ClaudeHostConfig,
    key_variables=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"),
    login_hint="set ANTHROPIC_API_KEY or log in: run `claude` and /login "
    "(or `claude setup-token` for CLAUDE_CODE_OAUTH_TOKEN)",
    other_credentials=_claude_credentials,
    version_env=(("DISABLE_AUTOUPDATER", "1"),),
)
AGENT_CLIS: dict[str, AgentCli] = {cli.kind: cli for cli in (CODEX, CLAUDE)}


def check_agent_cli(cli: AgentCli, cfg: AgentCliConfig, scope: str = "") -> list[Finding]:
    """The binary, version and key findings of ``cli`` under host config ``cfg``.

    ``scope`` prefixes each check's name (``"session 3f2a1b2c "``) when the config is
    one session's own rather than the defaults.
    """
    binary = _binary(cli, cfg, scope)
    if isinstance(binary, Finding):
        return [binary, _key(cli, cfg, scope)]
    return [_version(cli, cfg, binary, scope), _key(cli, cfg, scope)]


def _binary(cli: AgentCli, cfg: AgentCliConfig, scope: str) -> Path | Finding:
    try:
        return resolve_binary(cfg.binary, cli.kind)
    except TurnkeeperError as error:
        why = error.message  # the resolver's own words, kept in the finding
    if cfg.binary:
        detail = f"the host config's binary {cfg.binary!r} is not an executable ({why})"
        fix = f"point 'binary' at the {cli.kind} CLI, or install it: {cli.install}"
    else:
        detail = f"{cli.kind} is not on PATH nor in the install cache {install_cache_dir()}"
        fix = f"install it: {cli.install}"
    return Finding(
        extension=cli.kind, check=f"{scope}binary", status="missing", detail=detail, fix=fix
    )


def run_version(binary: Path, extra_env: dict[str, str]) -> str:
    """What ``BINARY --version`` prints (stdout, else stderr), within the timeout.

    ValueError says why there is no answer: it did not start, exited non-zero, or ran
    past the timeout (then its whole process group — started for it — is killed, so a
    wrapper's child cannot keep the pipes open).
    """
    try:
        proc = subprocess.Popen(
            [str(binary), "--version"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **extra_env},
            start_new_session=True,
        )
    except OSError as error:
        raise ValueError(f"it did not start ({one_line(error)})") from error
    try:
        out, err = proc.communicate(timeout=VERSION_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ValueError(f"it did not answer within {VERSION_TIMEOUT_SECONDS:g} s") from None
    text = out.decode(errors="replace").strip() or err.decode(errors="replace").strip()
    if proc.returncode != 0:
        last = text.splitlines()[-1][:200] if text else ""
        raise ValueError(f"it exited with code {proc.returncode}" + (f": {last}" if last else ""))
    return text


def parse_version(text: str) -> str | None:
    """The first ``X.Y.Z`` in a ``--version`` answer (``codex-cli 0.171.0``,
    ``2.1.197 (Claude Code)``)."""
    match = _VERSION.search(text)
    return match.group(1) if match else None


def _version(cli: AgentCli, cfg: AgentCliConfig, binary: Path, scope: str) -> Finding:
    check = f"{scope}version"
    env = dict(cli.version_env) | cfg.env
    try:
        answer = run_version(binary, env)
    except ValueError as why:
        return Finding(
            extension=cli.kind,
            check=check,
            status="wrong_version",
            detail=f"`{binary} --version` failed: {why}",
            fix=f"reinstall it: {cli.install}",
        )
    version = parse_version(answer)
    if version is None:
        return Finding(
            extension=cli.kind,
            check=check,
            status="wrong_version",
            detail=f"`{binary} --version` printed no version: {answer[:200]!r}",
            fix=f"install the tested version: {cli.install}",
        )
    if _release(version) < _release(cli.tested_version):
        return Finding(
            extension=cli.kind,
            check=check,
            status="wrong_version",
            detail=f"{binary} is {cli.kind} {version}, older than the {cli.tested_version} "
            "turnkeeper is tested with",
            fix=f"install the tested version: {cli.install}",
        )
    # A newer release usually works (its event stream changes rarely): ready, and said.
    newer = (
        f" (newer than the tested {cli.tested_version})" if version != cli.tested_version else ""
    )
    return Finding(
        extension=cli.kind,
        check=check,
        status="ok",
        detail=f"{cli.kind} {version} at {binary}{newer}",
    )


def _release(version: str) -> tuple[int, ...]:
    """``"2.1.197"`` -> ``(2, 1, 197)``: versions compared number by number."""
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def _key(cli: AgentCli, cfg: AgentCliConfig, scope: str) -> Finding:
    check = f"{scope}key"
    sources = [
        f"{name} is set in {where}"
        for name, where in filter(None, (_env_value(cfg, v) for v in cli.key_variables))
    ]
    sources += cli.other_credentials(cfg)
    if sources:
        return Finding(extension=cli.kind, check=check, status="ok", detail="; ".join(sources))
    looked = ", ".join(cli.key_variables)
    return Finding(
        extension=cli.kind,
        check=check,
        status="no_key",
        detail=f"no key or login found ({looked} unset, no login file)",
        fix=cli.login_hint,
    )
