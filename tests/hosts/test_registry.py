"""Host discovery through the ``turnkeeper.hosts`` entry-point group."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Any

import pytest

from turnkeeper.errors import InvalidArgument, NotFound
from turnkeeper.hosts import Host, TurnRequest, available_host_kinds, load_host, registry
from turnkeeper.hosts.subprocess_host import SubprocessRun


def test_builtins_are_registered_as_entry_points() -> None:
    # Needs the distribution installed (``pip install -e .``).
    names = {ep.name for ep in entry_points(group="turnkeeper.hosts")}
    assert {"subprocess", "python", "scripted"} <= names


@pytest.mark.parametrize(
    ("kind", "config"),
    [
        ("subprocess", {"command": ["true"]}),
        ("python", {"callable": "m:f"}),
        ("scripted", {}),
    ],
)
def test_load_builtin_hosts(kind: str, config: dict[str, Any]) -> None:
    host = load_host(kind, config)
    assert isinstance(host, Host)
    assert host.kind == kind


def test_unknown_kind_lists_the_known_ones() -> None:
    with pytest.raises(NotFound) as err:
        load_host("codex-9000")
    assert err.value.reason == "unknown_host_kind"
    assert err.value.details["known"] == available_host_kinds()
    assert "scripted" in err.value.message


def test_bad_config_is_invalid_argument() -> None:
    with pytest.raises(InvalidArgument):
        load_host("python", {"callable": "no colon"})
    with pytest.raises(InvalidArgument):
        load_host("scripted", {"script": {"default": {"steps": [{"op": "explode"}]}}})


class ThirdPartyHost:
    kind = "thirdparty"

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def start(self, request: TurnRequest) -> SubprocessRun:
        raise NotImplementedError


class NotAHost:
    def __init__(self, config: dict[str, Any]) -> None:
        pass


def test_third_party_entry_point(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    fake = [
        EntryPoint("thirdparty", f"{__name__}:ThirdPartyHost", "turnkeeper.hosts"),
        EntryPoint("broken", f"{__name__}:NotAHost", "turnkeeper.hosts"),
    ]
    monkeypatch.setattr(registry, "entry_points", lambda group: fake)
    registry.reload_host_kinds()  # the installed kinds are read once per process
    request.addfinalizer(registry.reload_host_kinds)
    host = load_host("thirdparty", {"x": 1})
    assert isinstance(host, ThirdPartyHost)
    assert host.config == {"x": 1}
    assert "thirdparty" in available_host_kinds()
    with pytest.raises(InvalidArgument, match="not a Host"):
        load_host("broken")


def test_a_host_class_is_checked_once_and_forgotten_on_reload(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    fake = [
        EntryPoint("thirdparty", f"{__name__}:ThirdPartyHost", "turnkeeper.hosts"),
        EntryPoint("broken", f"{__name__}:NotAHost", "turnkeeper.hosts"),
    ]
    monkeypatch.setattr(registry, "entry_points", lambda group: fake)
    registry.reload_host_kinds()
    request.addfinalizer(registry.reload_host_kinds)
    load_host("thirdparty")
    assert ThirdPartyHost in registry._host_types
    for _ in range(2):  # a class that is not a Host is never remembered as one
        with pytest.raises(InvalidArgument, match="not a Host"):
            load_host("broken")
    assert NotAHost not in registry._host_types
    registry.reload_host_kinds()  # a reloaded plugin may bring a changed class
    assert not registry._host_types
