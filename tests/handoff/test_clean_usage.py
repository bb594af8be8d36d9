"""The packet's leak check as a user meets it: ``turnkeeper handoff`` in a project made
by ``turnkeeper init`` refuses what ``turnkeeper scan`` calls a credential, a local
path or a signed link, naming the boundary rule, and hands over a monitor of a private
network's host that ``turnkeeper scan`` would still flag in a commit."""

from __future__ import annotations

import json
from typing import Any

from tests.boundary.fakes import anthropic_key, joined, random_text
from tests.usage.project import UserProject
from turnkeeper.boundary import Kind, scan_value

PRIVATE_NETWORK = joined("http", "://", "10.0.0.5", ":8080/health")


def _refusal(project: UserProject, goal: str, value: str) -> tuple[str, str, str]:
    """``handoff GOAL`` refused: its details' field, kind and shape. ``value`` (what
    leaked) must appear nowhere in what the user sees."""
    refused = project.tk("handoff", goal, "--json", expect=6)
    error: dict[str, Any] = json.loads(refused.stdout)["error"]
    assert error["code"] == "FAILED_PRECONDITION" and error["reason"] == "handoff_not_clean"
    assert value not in refused.stdout and value not in refused.stderr
    assert "Traceback" not in refused.stderr
    details: dict[str, str] = error["details"]
    return details["field"], details["kind"], details["shape"]


def test_handoff_refuses_what_the_boundary_rules_find(user_project: UserProject) -> None:
    tk = user_project.tk

    keyed = tk("goal", "add", "Keyed", "-q").stdout.strip()
    key = anthropic_key()
    tk("evidence", "record", keyed, "--key", "k", "-q", "--", "echo", key)
    expected = ("evidence[0].command", "credential", "anthropic_key")
    assert _refusal(user_project, keyed, key) == expected

    signed = tk("goal", "add", "Signed", "-q").stdout.strip()
    signature = random_text(24)
    link = joined("https", "://bucket.example.com/f?X-Amz-", "Signature=", signature)
    tk("todo", "add", signed, f"Fetch {link}", "-q")
    expected = ("todos[0].title", "private_link", "signed_url")
    assert _refusal(user_project, signed, signature) == expected

    rooted = tk("goal", "add", "Rooted", "-q").stdout.strip()
    root = str(user_project.root.resolve())
    tk("todo", "add", rooted, f"Read {root}/README.md", "-q")
    refused = _refusal(user_project, rooted, root)
    # A root under /tmp or a home directory is already a local path to the boundary's
    # rules; anywhere else it is refused as this project's own location.
    paths = [f.rule for f in scan_value(root) if f.kind is Kind.LOCAL_PATH]
    shape = paths[0] if paths else "project_location"
    assert refused == ("todos[0].title", "local_path", shape)
    assert not list(user_project.root.glob("*.json"))  # nothing was written


def test_a_private_network_monitor_is_handed_over_and_still_flagged_by_scan(
    user_project: UserProject,
) -> None:
    tk = user_project.tk
    goal = tk("goal", "add", "Serve", "-c", "healthy", "-q").stdout.strip()
    tk("monitor", "add", goal, PRIVATE_NETWORK, "--cadence", "60", "-q")
    tk("evidence", "record", goal, "--key", "up", "-q", "--", "true")

    tk("handoff", goal, "-o", "packet.json")
    packet = json.loads((user_project.root / "packet.json").read_text())
    assert packet["monitors"][0]["target"] == PRIVATE_NETWORK
    # Its digest, revision and times are carried as they are.
    [evidence] = packet["evidence"]
    assert len(evidence["output_digest"]) == 64 and evidence["revision"]

    # The packet's exemption is the packet's: the boundary scan is not weakened by it.
    scanned = json.loads(tk("scan", "packet.json", "--json", expect=6).stdout)
    rules = {(f["kind"], f["rule"]) for f in scanned["findings"]}
    assert rules == {("private_link", "private_host_url")}, scanned
