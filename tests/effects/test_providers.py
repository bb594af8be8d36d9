"""The built-in providers against real endpoints, the registry and the session config."""

from __future__ import annotations

import socket
import sys
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue

from tests.effects.service import CountingService
from turnkeeper.effects import (
    EffectProvider,
    Readback,
    available_provider_kinds,
    effects_config,
    load_provider,
    split_host_config,
)
from turnkeeper.effects import registry as registry_module
from turnkeeper.effects.command_provider import CommandProvider
from turnkeeper.effects.http_provider import HttpProvider
from turnkeeper.errors import InvalidArgument, NotFound

KEY = "tkturn1-0123456789abcdef-e0"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- http -------------------------------------------------------------------------------


def test_http_apply_carries_the_key_and_readback_finds_it(service: CountingService) -> None:
    provider = HttpProvider(service.provider_config())
    assert provider.readback(KEY, {}) == Readback.not_applied("HTTP 404")
    result = provider.apply(KEY, {"body": {"n": 1}, "headers": {"X-Note": "hi"}})
    assert result.accepted and result.detail == "HTTP 201"
    assert service.count(KEY) == 1
    seen = provider.readback(KEY, {})
    assert seen.status == "applied"
    assert seen.value == {"key": KEY, "body": {"n": 1}, "count": 1}


def test_http_readback_that_cannot_tell_is_unknown(service: CountingService) -> None:
    blind = HttpProvider(service.provider_config(readback="blind"))
    assert blind.readback(KEY, {}) == Readback.unknown("HTTP 503")
    nowhere = HttpProvider(
        {
            "url": f"http://127.0.0.1:{_free_port()}/x",
            "readback_url": f"http://127.0.0.1:{_free_port()}/x/{{key}}",
            "timeout_seconds": 2,
        }
    )
    seen = nowhere.readback(KEY, {})
    assert seen.status == "unknown" and "URLError" in seen.detail
    assert not nowhere.apply(KEY, {}).accepted


def test_http_custom_header_and_secret_from_env(
    service: CountingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EFFECT_TOKEN", "s3cret")
    provider = HttpProvider(
        {**service.provider_config(), "header_env": {"Authorization": "EFFECT_TOKEN"}}
    )
    headers = provider._headers(KEY, {"headers": {"Idempotency-Key": "forged"}})
    assert headers["Authorization"] == "s3cret"
    assert headers["Idempotency-Key"] == KEY  # the request cannot override the key


@pytest.mark.parametrize(
    "config",
    [
        {"url": "http://x/", "readback_url": "http://x/no-key"},
        {"url": "ftp://x/", "readback_url": "http://x/{key}"},
        {"readback_url": "http://x/{key}"},
        {"url": "http://x/", "readback_url": "http://x/{key}", "surprise": 1},
    ],
)
def test_http_config_is_validated(config: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument) as info:
        HttpProvider(config)
    assert info.value.reason == "invalid_effect_config"


def test_http_requests_are_validated() -> None:
    provider = HttpProvider({"url": "http://x/", "readback_url": "http://x/{key}"})
    provider.validate_request({"body": [1], "headers": {"A": "b"}})
    bad_requests: list[dict[str, JsonValue]] = [
        {"url": "http://elsewhere"},
        {"headers": ["x"]},
        {"headers": {"A": 1}},
    ]
    for bad in bad_requests:
        with pytest.raises(InvalidArgument):
            provider.validate_request(bad)


# --- command ------------------------------------------------------------------------------


def _marker_commands(tmp_path: Path) -> dict[str, Any]:
    """apply writes <dir>/<key> (and counts in <dir>/log); readback checks it."""
    return {
        "apply": f"echo {{key}} >> {tmp_path}/log && cat > {tmp_path}/{{key}}",
        "readback": f"test -f {tmp_path}/{{key}} && cat {tmp_path}/{{key}} || exit 1",
    }


def test_command_apply_and_readback(tmp_path: Path) -> None:
    provider = CommandProvider(_marker_commands(tmp_path))
    assert provider.readback(KEY, {}) == Readback.not_applied("exit 1")
    assert provider.apply(KEY, {"n": 1}).accepted
    seen = provider.readback(KEY, {"n": 1})
    assert seen == Readback.applied({"n": 1}, "exit 0")  # stdin was the request
    assert (tmp_path / "log").read_text().split() == [KEY]


def test_command_argv_env_and_exit_codes(tmp_path: Path) -> None:
    script = (
        "import os, sys; "
        "assert os.environ['TURNKEEPER_EFFECT_KEY'] == sys.argv[1]; "
        "sys.exit(int(os.environ['CODE']))"
    )
    argv = [sys.executable, "-c", script, "{key}"]
    for code, status in ((0, "applied"), (1, "not_applied"), (2, "unknown"), (127, "unknown")):
        provider = CommandProvider({"apply": argv, "readback": argv, "env": {"CODE": str(code)}})
        assert provider.readback(KEY, {}).status == status
        assert provider.apply(KEY, {}).accepted is (code == 0)


def test_command_timeout_and_missing_program_are_unknown(tmp_path: Path) -> None:
    slow = CommandProvider({"apply": "true", "readback": "sleep 5", "timeout_seconds": 0.2})
    assert slow.readback(KEY, {}).status == "unknown"
    missing = CommandProvider({"apply": ["/nonexistent/x"], "readback": ["/nonexistent/x"]})
    seen = missing.readback(KEY, {})
    assert seen.status == "unknown" and "FileNotFoundError" in seen.detail
    assert not missing.apply(KEY, {}).accepted


# --- registry and config --------------------------------------------------------------------


def test_registry_builtins_and_errors() -> None:
    assert {"http", "command"} <= set(available_provider_kinds())
    provider = load_provider("command", {"apply": "true", "readback": "true"})
    assert isinstance(provider, EffectProvider)
    with pytest.raises(NotFound) as missing:
        load_provider("nope", {})
    assert missing.value.reason == "unknown_effect_provider"
    with pytest.raises(InvalidArgument):
        load_provider("http", {})


class _NotAProvider:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config


class _Echo:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def apply(self, key: str, request: Any) -> Any:
        raise AssertionError("not called")

    def readback(self, key: str, request: Any) -> Readback:
        return Readback.applied(self.config)


def test_registry_discovers_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    found = [
        EntryPoint("echo", f"{__name__}:_Echo", "turnkeeper.effects"),
        EntryPoint("bogus", f"{__name__}:_NotAProvider", "turnkeeper.effects"),
    ]

    def fake_entry_points(*, group: str) -> list[EntryPoint]:
        assert group == "turnkeeper.effects"
        return found

    monkeypatch.setattr(registry_module, "entry_points", fake_entry_points)
    assert "echo" in available_provider_kinds()
    assert load_provider("echo", {"a": 1}).readback(KEY, {}) == Readback.applied({"a": 1})
    with pytest.raises(InvalidArgument) as info:
        load_provider("bogus", {})
    assert info.value.reason == "invalid_effect_provider"


def test_session_config_section() -> None:
    host_config = {
        "script": {"turns": []},
        "effects": {
            "providers": {
                "http": {"url": "http://x/", "readback_url": "http://x/{key}"},
                "notify": {"kind": "command", "apply": "a {key}", "readback": "r {key}"},
            }
        },
    }
    assert split_host_config(host_config) == {"script": {"turns": []}}
    config = effects_config(host_config)
    spec = config.spec("notify")
    assert spec is not None and spec.kind == "command" and "kind" not in spec.config
    http = config.spec("http")
    assert http is not None and http.kind == "http"
    assert config.spec("other") is None
    assert effects_config({}).providers == {}
    bad_configs: list[Any] = [{"providers": {"bad name": {}}}, {"providers": [1]}, {"surprise": 1}]
    for bad in bad_configs:
        with pytest.raises(InvalidArgument) as info:
            effects_config({"effects": bad})
        assert info.value.reason == "invalid_effects_config"
