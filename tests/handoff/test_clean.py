"""The packet's leak check on its own: what it refuses (the boundary's rules, by kind,
and this project's locations), and what a packet legitimately carries that it lets by.

Every secret and path is assembled at run time (``tests.boundary.fakes``), so this
file's own source passes ``turnkeeper scan``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest

from tests.boundary.fakes import (
    anthropic_key,
    aws_key_id,
    github_token,
    home_path,
    joined,
    jwt,
    openai_key,
    pem_header,
    random_text,
    slack_token,
)
from turnkeeper.boundary import Kind, scan_value
from turnkeeper.errors import FailedPrecondition
from turnkeeper.handoff.clean import PACKET_EXEMPT_RULES, PACKET_KINDS, check_clean, find_leak

PROJECT = "/srv/projects/parser"
LOOPBACK = joined("http", "://", "127.0.0.1", ":8080/health")
PRIVATE_NETWORK = joined("http", "://", "10.0.0.5", ":8080/health")

# A text that must be refused -> the kind and the shape (boundary rule) it is refused as.
LEAKS: dict[str, tuple[Callable[[], str], Kind, str]] = {
    "anthropic key": (lambda: f"echo {anthropic_key()}", Kind.CREDENTIAL, "anthropic_key"),
    "openai key": (openai_key, Kind.CREDENTIAL, "openai_key"),
    "github token": (lambda: f"token {github_token()}", Kind.CREDENTIAL, "github_token"),
    "aws key id": (aws_key_id, Kind.CREDENTIAL, "aws_access_key"),
    "slack token": (slack_token, Kind.CREDENTIAL, "slack_token"),
    "pem header": (pem_header, Kind.CREDENTIAL, "private_key"),
    "jwt": (lambda: f"Bearer {jwt()}", Kind.CREDENTIAL, "jwt"),
    "url password": (
        lambda: joined("postgresql", "://user:", random_text(12), "@db/x"),
        Kind.CREDENTIAL,
        "url_credentials",
    ),
    "password in a loopback url": (
        lambda: joined("postgresql", "://user:", random_text(12), "@127.0.0.1/db"),
        Kind.CREDENTIAL,
        "url_credentials",
    ),
    "secret assignment": (
        lambda: joined("API_", "TOKEN=", random_text(32)),
        Kind.CREDENTIAL,
        "high_entropy_assignment",
    ),
    "home path": (lambda: f"cat {home_path()}", Kind.LOCAL_PATH, "home_path"),
    "mac home": (lambda: joined("/", "Users/bob/notes"), Kind.LOCAL_PATH, "home_path"),
    "root home": (lambda: joined("ls /", "root/.ssh"), Kind.LOCAL_PATH, "root_path"),
    "tmp dir": (lambda: joined("read '/", "tmp/scratch/file'"), Kind.LOCAL_PATH, "tmp_path"),
    "windows home": (
        lambda: joined("C:", "\\Users\\bob\\notes.txt"),
        Kind.LOCAL_PATH,
        "windows_user_path",
    ),
    "signed url": (
        lambda: joined("https", "://bucket.example.com/f?X-Amz-", "Signature=", random_text(24)),
        Kind.PRIVATE_LINK,
        "signed_url",
    ),
    "token on loopback": (
        lambda: joined(LOOPBACK, "?token=", random_text(16)),
        Kind.PRIVATE_LINK,
        "signed_url",
    ),
    "project location": (lambda: f"under {PROJECT}/src", Kind.LOCAL_PATH, "project_location"),
}

# What a packet carries as it is: none of these is refused.
CLEAN: dict[str, Callable[[], str]] = {
    "hyphenated words": lambda: "task-list and desk-top, ask-me-anything",
    "relative path": lambda: "test -s build/tmp/page.md",
    "public url": lambda: "https://example.com/docs",
    "a prefix alone": lambda: "AKIA is a prefix",
    "git command": lambda: "git rev-parse HEAD",
    "loopback monitor": lambda: f"curl -fsS {LOOPBACK}",
    "localhost url": lambda: joined("http", "://", "localhost:5173/"),
    "private network monitor": lambda: f"curl -fsS {PRIVATE_NETWORK}",
    "sha256 digest": lambda: hashlib.sha256(b"output").hexdigest(),
    "prefixed digest": lambda: "sha256:" + hashlib.sha256(b"x").hexdigest(),
    "git revision": lambda: hashlib.sha1(b"commit").hexdigest(),
    "iso time": lambda: "2025-03-14T09:26:53.589793+00:00",
    "one file in tmp": lambda: "cat /tmp/out.txt",
}


@pytest.mark.parametrize("case", list(LEAKS))
def test_a_leak_is_found_and_named_by_field_kind_and_rule(case: str) -> None:
    make, kind, shape = LEAKS[case]
    document = {"todos": [{"title": "fine"}, {"title": make()}]}
    leak = find_leak(document, [PROJECT + "/"])
    assert leak is not None
    assert (leak.field, leak.kind, leak.shape) == ("todos[1].title", kind, shape)


@pytest.mark.parametrize("case", list(CLEAN))
def test_what_a_packet_legitimately_carries_is_not_a_leak(case: str) -> None:
    text = CLEAN[case]()
    assert find_leak({"a": [text, {"b": text}], text: 1}, [PROJECT]) is None


def test_the_boundary_itself_still_flags_a_private_network_url() -> None:
    # The packet lets it by; ``turnkeeper scan`` must not (its rules are not weakened).
    [finding] = scan_value(f"curl -fsS {PRIVATE_NETWORK}")
    assert (finding.kind, finding.rule) == (Kind.PRIVATE_LINK, "private_host_url")
    assert finding.rule in PACKET_EXEMPT_RULES and finding.kind in PACKET_KINDS
    # A loopback URL is every machine's: neither the packet nor the scan refuses it.
    assert scan_value(f"curl -fsS {LOOPBACK}") == []


def test_a_key_is_checked_too_and_the_refusal_never_repeats_the_value() -> None:
    key = openai_key()
    document = {"payload": {key: 1}}
    with pytest.raises(FailedPrecondition) as refused:
        check_clean(document)
    assert refused.value.reason == "handoff_not_clean"
    assert refused.value.details == {
        "field": "payload (a key)",
        "kind": "credential",
        "shape": "openai_key",
    }
    assert key[:12] not in refused.value.message and key[:12] not in str(refused.value.details)
    assert "OpenAI API key" in refused.value.message


def test_the_first_leak_in_packet_order_is_the_one_named() -> None:
    document = {
        "goal": {"title": "fine"},
        "evidence": [{"command": "true"}, {"command": f"cat {home_path()}"}],
        "todos": [{"title": f"use {github_token()}"}],
    }
    leak = find_leak(document)
    assert leak is not None and (leak.field, leak.shape) == ("evidence[1].command", "home_path")


def test_a_nested_document_is_walked_whole() -> None:
    document: object = github_token()
    for _ in range(2000):  # deeper than Python's recursion limit
        document = {"next": [document]}
    leak = find_leak(document)
    assert leak is not None and leak.field.endswith("next[0]") and leak.kind is Kind.CREDENTIAL


@pytest.mark.parametrize("root", ["", "/", "///"])
def test_a_root_that_names_nothing_is_not_a_location(root: str) -> None:
    # "/" is in every absolute path: it must not turn every path into a leak.
    assert find_leak({"a": "see /srv/other/file"}, [root]) is None
