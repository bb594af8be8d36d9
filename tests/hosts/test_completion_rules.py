"""When a command that printed no result completes its todo, on real processes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.hosts.conftest import MakeRequest
from turnkeeper.errors import InvalidArgument
from turnkeeper.hosts import HostStatus
from turnkeeper.hosts.agent_cli import AgentCliConfig
from turnkeeper.hosts.subprocess_config import SubprocessHostConfig
from turnkeeper.hosts.subprocess_host import SubprocessHost


def result_of(make_request: MakeRequest, config: dict[str, Any], **request: Any) -> Any:
    outcome = SubprocessHost(config).start(make_request(**request)).wait(20)
    assert outcome.status is HostStatus.SUCCEEDED, outcome
    return outcome.result


@pytest.mark.parametrize(
    ("rule", "script", "done"),
    [
        ({}, "echo working", True),  # the default: on_success
        ({"complete_todo": "on_success"}, "true", True),
        ({"complete_todo": "never"}, "echo TODO DONE", False),
        ({"complete_todo": "on_marker"}, "echo working; echo 'all of it: TODO DONE'", True),
        ({"complete_todo": "on_marker"}, "echo working", False),
        ({"complete_todo": "on_marker", "done_marker": "FIN"}, "echo TODO DONE", False),
        ({"complete_todo": "on_marker", "done_marker": "FIN"}, "echo FIN", True),
    ],
)
def test_a_text_command_completes_its_todo_by_its_rule(
    make_request: MakeRequest, rule: dict[str, Any], script: str, done: bool
) -> None:
    config = {"command": ["sh", "-c", script], **rule}
    assert result_of(make_request, config, todo_id="t1") == {"todo_done": done}


def test_a_turn_without_a_todo_reports_nothing(make_request: MakeRequest) -> None:
    assert result_of(make_request, {"command": ["true"]}) == {}


def test_a_failed_command_completes_nothing(make_request: MakeRequest) -> None:
    run = SubprocessHost({"command": ["sh", "-c", "echo TODO DONE; exit 4"]})
    outcome = run.start(make_request(todo_id="t1")).wait(20)
    assert outcome.status is HostStatus.FAILED
    assert outcome.result == {}


def _jsonl(*events: dict[str, Any]) -> list[str]:
    lines = "\n".join(json.dumps(e) for e in events)
    return ["sh", "-c", f"cat <<'EOF'\n{lines}\nEOF"]


def test_a_result_line_always_wins_over_the_rule(make_request: MakeRequest) -> None:
    config = {
        "command": _jsonl({"kind": "result", "data": {"summary": "not yet"}}),
        "event_format": "jsonl",
    }
    # on_success would complete the todo; the result, which does not, wins.
    assert result_of(make_request, config, todo_id="t1") == {"summary": "not yet"}


def test_jsonl_without_a_result_follows_the_rule_on_its_messages(
    make_request: MakeRequest,
) -> None:
    said = _jsonl({"kind": "message", "data": {"text": "TODO DONE"}})
    quiet = _jsonl({"kind": "message", "data": {"text": "still working"}})
    marker = {"event_format": "jsonl", "complete_todo": "on_marker"}
    assert result_of(make_request, {"command": said, **marker}, todo_id="t") == {"todo_done": True}
    assert result_of(make_request, {"command": quiet, **marker}, todo_id="t") == {
        "todo_done": False
    }
    default = {"command": quiet, "event_format": "jsonl"}
    assert result_of(make_request, default, todo_id="t") == {"todo_done": True}


def test_the_agent_cli_hosts_share_the_rule_and_its_default() -> None:
    plain, cli = SubprocessHostConfig.model_fields, AgentCliConfig.model_fields
    for name in ("complete_todo", "done_marker"):
        assert plain[name].annotation == cli[name].annotation
        assert plain[name].default == cli[name].default
    assert plain["complete_todo"].default == "on_success"


def test_an_unknown_rule_is_refused_at_load() -> None:
    with pytest.raises(InvalidArgument, match="complete_todo"):
        SubprocessHost({"command": ["true"], "complete_todo": "sometimes"})
    with pytest.raises(InvalidArgument, match="done_marker"):
        SubprocessHost({"command": ["true"], "done_marker": ""})
