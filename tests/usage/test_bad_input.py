"""Bad input, exactly as a user types it: a typed error, its exit code, nothing written.

Every case runs the installed ``turnkeeper`` in a project made by ``turnkeeper init``
and checks the error's exit code (the README's table), the ``--json`` error body and
its reason, that no traceback reached stderr, and that not one durable row changed.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.usage.project import UserProject
from tests.usage.refusals import record_as_an_older_version_did, refused, refused_plainly
from turnkeeper.kernel.events import TodoAdded

GOAL = "g1"
TODO = "t1"
DEEP = 100_000  # far deeper than Python's recursion limit


def nested(depth: int, inner: str = "0") -> str:
    return "[" * depth + inner + "]" * depth


@pytest.fixture
def project(user_project: UserProject) -> UserProject:
    user_project.tk("goal", "add", "Ship the parser", "--id", GOAL)
    user_project.tk("todo", "add", GOAL, "Write the tokenizer", "--id", TODO)
    return user_project


# --- text that is not UTF-8 --------------------------------------------------------------


def test_arguments_that_are_not_utf8_are_refused(project: UserProject) -> None:
    error = refused(project, "goal", "add", b"caf\xe9", reason="not_utf8")
    assert error["details"]["field"] == "title"
    assert refused(project, "todo", "add", GOAL, b"\xff\xfe", reason="not_utf8")["details"] == {
        "field": "title"
    }
    assert refused(project, "goal", "show", b"g\xe9", reason="not_utf8")["details"] == {
        "field": "goal_id"
    }
    # The command is refused before it runs (it would have made ``ran``).
    cmd = refused(
        project, "evidence", "record", GOAL, "--", "touch", "ran", b"\xe9", reason="not_utf8"
    )
    assert cmd["details"]["field"] == "command"
    assert not (project.root / "ran").exists()
    # And without --json: a message a person can read, not a crash while printing it.
    refused_plainly(project, "goal", "add", b"caf\xe9", reason="not_utf8")


def test_stdin_and_files_that_are_not_utf8_text_are_refused(project: UserProject) -> None:
    refused(project, "session", "create", GOAL, "--host-config", "@/bin/true", reason="not_utf8")
    binary = project.root.parent / "binary.json"
    binary.write_bytes(b'{"kind": "note", "author": "me", "text": "caf\xe9"}')
    refused(project, "propose", GOAL, "--proposal", f"@{binary}", reason="not_utf8")
    refused(project, "propose", GOAL, "--proposal", "-", input=b"\xff", reason="not_utf8")
    # A JSON escape for a lone surrogate decodes to text that cannot be stored either.
    note = '{"kind": "note", "author": "me", "text": "\\udce9"}'
    refused(project, "propose", GOAL, "--proposal", note, reason="not_utf8")


# --- @FILE arguments -----------------------------------------------------------------------


def test_file_arguments_must_be_small_regular_files(project: UserProject) -> None:
    folder = project.root.parent / "a-folder"
    folder.mkdir()
    big = project.root.parent / "big.json"
    big.write_text(json.dumps({"filler": "x" * (1 << 20)}))
    missing = project.root.parent / "missing.json"
    for option in (("session", "create", GOAL, "--host-config"), ("propose", GOAL, "--proposal")):
        assert refused(project, *option, f"@{folder}", reason="not_a_file")["details"]["path"]
        refused(project, *option, f"@{big}", reason="file_too_large")
        refused(project, *option, f"@{missing}", reason="missing_file")
    stdin = big.read_bytes()
    refused(project, "propose", GOAL, "--proposal", "-", input=stdin, reason="file_too_large")


# --- JSON --------------------------------------------------------------------------------


def test_json_nested_deeper_than_the_bound_is_malformed(project: UserProject) -> None:
    gate = project.tk_json("gate", "open", GOAL, "Approve the release")["gate_id"]
    monitor = project.tk_json("monitor", "add", GOAL, "ci", "--cadence", "60")["monitor_id"]
    deep = nested(DEEP).encode()
    deep_object = ('{"a": ' * DEEP + "0" + "}" * DEEP).encode()
    deep_file = project.root.parent / "deep.json"
    deep_file.write_text('{"a": ' + nested(DEEP) + "}")
    cases: list[tuple[tuple[str, ...], bytes | None]] = [
        (("propose", GOAL, "--proposal", "-"), deep),
        (("propose", GOAL, "--proposal", "-"), deep_object),
        (("propose", GOAL, "--proposal", f"@{deep_file}"), None),
        (("session", "create", GOAL, "--host-config", f"@{deep_file}"), None),
        (("session", "create", GOAL, "--host-config", "-"), b'{"a": ' + deep + b"}"),
        (("gate", "resolve", gate, "--decision", "ok", "--by", "me", "--payload", "-"), deep),
        (("monitor", "readback", monitor, "--value", "-"), deep),
        # Just past the stated bound of 64 levels, short enough for argv.
        (("monitor", "readback", monitor, "--value", nested(65)), None),
    ]
    for args, stdin in cases:
        error = refused(project, *args, input=stdin, reason="malformed_json")
        assert error["details"]["option"] in {"--proposal", "--host-config", "--payload", "--value"}
    refused(project, "monitor", "readback", monitor, "--value", "NaN", reason="malformed_json")
    # Within the bound, the same commands are accepted.
    project.tk("monitor", "readback", monitor, "--value", nested(60))
    payload = ('{"a": ' + nested(50) + "}").encode()
    resolve = ("gate", "resolve", gate, "--decision", "ok", "--by", "me", "--payload", "-")
    project.tk(*resolve, input=payload)


# --- numbers -------------------------------------------------------------------------------


def test_lease_and_timeout_options_are_finite_positive_and_bounded(project: UserProject) -> None:
    for lease in ("1000000000000", "0", "-5", str(30 * 86400 + 1)):
        error = refused(project, "todo", "claim", TODO, "--lease", lease, reason="out_of_range")
        assert error["details"]["option"] == "--lease"
    for lease in ("nan", "inf", "-inf", "1e308", "0", "-1", "86401"):
        error = refused(project, "run", "--lease", lease, reason="out_of_range")
        assert error["details"]["option"] == "--lease"
    for timeout in ("0", "-3", str(7 * 86400 + 1)):
        error = refused(project, "run", "--host-timeout", timeout, reason="out_of_range")
        assert error["details"]["option"] == "--host-timeout"
    for turns in ("-1", "1000001"):
        error = refused(project, "run", "--max-turns", turns, reason="out_of_range")
        assert error["details"]["option"] == "--max-turns"
    evidence = ("evidence", "record", GOAL, "--timeout", "0", "--", "true")
    refused(project, *evidence, reason="out_of_range")
    # What Typer cannot parse as a number at all is a usage error (exit 2).
    usage = project.tk("todo", "claim", TODO, "--lease", "abc", expect=2)
    assert "Traceback" not in usage.stderr
    # A lease within the bounds works.
    assert project.tk_json("todo", "claim", TODO, "--lease", "600")["epoch"] == 1


def test_durations_in_proposals_are_bounded(project: UserProject) -> None:
    monitor = {"kind": "add_monitor", "monitor_id": "m", "target": "ci", "cadence_seconds": 10**15}
    error = refused(
        project, "propose", GOAL, "--proposal", json.dumps(monitor), reason="out_of_range"
    )
    assert error["details"]["field"] == "cadence_seconds"
    add = ("monitor", "add", GOAL, "ci", "--cadence", str(10**12))
    error = refused(project, *add, reason="out_of_range")
    assert error["details"]["field"] == "cadence_seconds"
    # The longest cadence allowed is one the kernel can add to now and read back.
    longest = str(10 * 366 * 24 * 3600)
    mid = project.tk_json("monitor", "add", GOAL, "ci", "--cadence", longest)["monitor_id"]
    project.tk("monitor", "readback", mid, "--value", '"green"')
    monitor = project.tk_json("goal", "show", GOAL)["state"]["monitors"][mid]
    assert monitor["next_due"] > "2035"
    assert project.tk_json("status")["goals"][0]["audit"]["due_monitors"] == 0


# --- ids and titles ------------------------------------------------------------------------


def test_ids_are_one_to_200_characters_without_whitespace_or_control(project: UserProject) -> None:
    refused(project, "goal", "add", "T", "--id", "", reason="empty_goal_id")
    cases = {
        "a\nb": "control_characters",
        "a\x1bb": "control_characters",
        "a\tb": "control_characters",
        "a b": "invalid_id",
        "a\u00a0b": "invalid_id",  # a no-break space is whitespace too
        "x" * 201: "text_too_long",
    }
    for bad, reason in cases.items():
        assert (
            refused(project, "goal", "add", "T", "--id", bad, reason=reason)["details"]["field"]
            == "goal_id"
        )
        assert (
            refused(project, "todo", "add", GOAL, "T", "--id", bad, reason=reason)["details"][
                "field"
            ]
            == "todo_id"
        )
    error = refused(project, "todo", "claim", TODO, "--owner", "a user", reason="invalid_id")
    assert error["details"]["field"] == "owner"
    # Through propose, the field is named by its path in the proposal.
    spec = {"todo_id": "bad id", "title": "T"}
    proposal = json.dumps({"kind": "add_todo", "todo": spec})
    error = refused(project, "propose", GOAL, "--proposal", proposal, reason="invalid_id")
    assert error["details"]["field"] == "todo.todo_id"
    # 200 characters is still an id.
    project.tk("goal", "add", "T", "--id", "x" * 200)


def test_titles_are_one_bounded_line(project: UserProject) -> None:
    error = refused(project, "todo", "add", GOAL, "x" * 2001, reason="text_too_long")
    assert error["details"]["field"] == "title"
    refused(project, "goal", "add", "x" * 2001, reason="text_too_long")
    refused(project, "todo", "add", GOAL, "two\nlines", reason="control_characters")
    refused(project, "goal", "add", "\x1b[31mred", reason="control_characters")
    refused(project, "goal", "add", "T", "--objective", "o" * 20_001, reason="text_too_long")
    # Free text keeps its newlines.
    project.tk("goal", "add", "T", "--objective", "first line\nsecond line\tindented")
    # The longest title the kernel accepts is one the session planner accepts too.
    project.tk("todo", "add", GOAL, "y" * 2000)


def test_a_recorded_title_longer_than_the_limit_does_not_stop_the_session(
    user_project: UserProject,
) -> None:
    """A todo title recorded before titles were bounded: ``run`` works it, no crash."""
    user_project.tk("goal", "add", "Ship it", "--id", GOAL)
    title = "t" * 3000
    record_as_an_older_version_did(
        user_project,
        GOAL,
        TodoAdded(
            todo_id=TODO,
            title=title,
            depends_on=[],
            required_evidence=[],
            successor_required=False,
            successor_of=None,
            at=datetime.now(UTC),
        ),
    )
    assert user_project.tk_json("goal", "show", GOAL)["state"]["todos"][TODO]["title"] == title
    write = {"op": "write", "path": "out.txt", "content": "done\n"}
    script = {"turns": [{"steps": [write], "result": {"todo_done": True}}]}
    config = user_project.host_config("scripted", {"script": script})
    user_project.tk("session", "create", GOAL, "--host-config", config, "--workspace", ".")
    run = user_project.start("run", "--json")
    assert run.wait() == 0, run.output()
    assert "Traceback" not in run.err.read_text(), run.output()
    summary = run.summary()
    assert (summary["turns"], summary["failed_turns"]) == (1, 0), summary
    shown = user_project.tk_json("goal", "show", GOAL)["state"]
    assert shown["todos"][TODO]["status"] == "done"
    assert shown["goal"]["status"] == "closed"
    assert (user_project.root / "out.txt").read_text() == "done\n"


def test_a_missing_goal_is_still_not_found(project: UserProject) -> None:
    """The new checks come before nothing that used to say what was wrong."""
    refused(project, "goal", "show", "nope", code="NOT_FOUND", reason="goal_not_found")
    path = Path("/definitely/not/here.json")
    refused(project, "session", "create", GOAL, "--host-config", f"@{path}", reason="missing_file")
