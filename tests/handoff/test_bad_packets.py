"""Packets ``turnkeeper adopt`` refuses, each with its typed error and no traceback,
and nothing written: not JSON, not a packet, another schema version, a malformed or
inconsistent part, a file that is not there or not text."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.usage.project import UserProject

Mutation = Callable[[dict[str, Any]], Any]


def _drop_goal(p: dict[str, Any]) -> Any:
    del p["goal"]
    return p


def _dangling_dependency(p: dict[str, Any]) -> Any:
    p["todos"][1]["depends_on"] = ["todo-nowhere"]
    return p


def _unknown_field(p: dict[str, Any]) -> Any:
    p["todos"][0]["transcript"] = "hello"
    return p


def _bad_id(p: dict[str, Any]) -> Any:
    p["todos"][0]["id"] = "has spaces and\nnewlines"
    p["todos"][1]["depends_on"] = ["has spaces and\nnewlines"]
    return p


CASES: dict[str, tuple[Mutation | bytes, int, str, str]] = {
    "not json": (b"{not json", 3, "packet_malformed", "not JSON"),
    "not utf-8": (b"\xff\xfe{}", 3, "packet_malformed", "not UTF-8"),
    "an array": (lambda p: [p], 3, "packet_malformed", "JSON object"),
    "another kind": (lambda p: {**p, "kind": "something.else"}, 3, "packet_malformed", "kind"),
    "version 2": (lambda p: {**p, "schema_version": 2}, 3, "packet_version", "version 2"),
    "no version": (
        lambda p: {k: v for k, v in p.items() if k != "schema_version"},
        3,
        "packet_version",
        "None",
    ),
    "no goal": (_drop_goal, 3, "packet_malformed", "goal"),
    "unknown field": (_unknown_field, 3, "packet_malformed", "todos.0.transcript"),
    "dangling dependency": (_dangling_dependency, 3, "packet_malformed", "todos[1].depends_on"),
    "id the kernel refuses": (_bad_id, 3, "packet_malformed", "control characters"),
}


@pytest.fixture(scope="module")
def packet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    made = UserProject(tmp_path_factory.mktemp("handoff") / "origin")
    try:
        tk = made.tk
        goal = tk("goal", "add", "Handed over", "-c", "it works", "--id", "handed", "-q").stdout
        first = tk("todo", "add", goal.strip(), "First", "-q").stdout.strip()
        tk("todo", "add", goal.strip(), "Second", "--depends-on", first, "-q")
        text = tk("handoff", goal.strip()).stdout  # no -o: the packet on stdout
        yield json.loads(text)
    finally:
        made.close()


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UserProject]:
    """The adopting project: every refusal below must leave it as it was."""
    made = UserProject(tmp_path_factory.mktemp("handoff") / "other")
    try:
        yield made
    finally:
        made.close()


def _said(text: str) -> str:
    return " ".join(text.split())  # the terminal may wrap a long message


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_packet_is_refused_with_its_typed_error(
    case: str, packet: dict[str, Any], other: UserProject, tmp_path: Path
) -> None:
    change, code, reason, words = CASES[case]
    path = tmp_path / "bad.json"
    if isinstance(change, bytes):
        path.write_bytes(change)
    else:
        path.write_text(json.dumps(change(json.loads(json.dumps(packet)))))
    before = other.durable_digest()
    refused = other.tk("adopt", str(path), expect=code)
    said = _said(refused.stderr)
    assert reason in said and words in said, said
    assert "Traceback" not in refused.stderr + refused.stdout
    assert other.durable_digest() == before  # nothing was written
    as_json = json.loads(other.tk("adopt", str(path), "--json", expect=code).stdout)
    assert as_json["error"]["reason"] == reason


def test_a_missing_packet_file_and_a_directory_are_refused(
    other: UserProject, tmp_path: Path
) -> None:
    missing = other.tk("adopt", str(tmp_path / "nowhere.json"), expect=3)
    assert "missing_file" in missing.stderr and "Traceback" not in missing.stderr
    folder = other.tk("adopt", str(tmp_path), expect=3)
    assert "not_a_file" in folder.stderr and "Traceback" not in folder.stderr


def test_an_id_already_taken_here_is_refused_before_anything_is_written(
    packet: dict[str, Any], other: UserProject, tmp_path: Path
) -> None:
    path = tmp_path / "packet.json"
    path.write_text(json.dumps(packet))
    other.tk("goal", "add", "Mine", "--id", "mine", "-q")
    other.tk("todo", "add", "mine", "Mine too", "--id", packet["todos"][0]["id"], "-q")
    before = other.durable_digest()
    refused = other.tk("adopt", str(path), expect=8)
    assert "packet_id_taken" in refused.stderr and "Traceback" not in refused.stderr
    assert other.durable_digest() == before
