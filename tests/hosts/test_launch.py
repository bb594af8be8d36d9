"""hosts/launch.py: whether a host's program can run, asked before every spawn."""

from __future__ import annotations

import os
from pathlib import Path

from tests.hosts.conftest import MakeRequest
from turnkeeper.hosts import launch


def test_a_program_found_before_is_looked_for_again_once_it_no_longer_runs(
    tmp_path: Path,
) -> None:
    # Where a program was found is remembered only as the first place to look: once it
    # is gone there, the answer is the full search's again.
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    program = first / "agent"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    search = os.pathsep.join([str(first), str(second)])
    assert launch.unrunnable("agent", search, tmp_path) is None
    program.chmod(0o644)
    assert launch.unrunnable("agent", search, tmp_path) == (
        "[Errno 2] No such file or directory: 'agent'"
    )
    moved = second / "agent"
    moved.write_text("#!/bin/sh\n")
    moved.chmod(0o755)
    assert launch.unrunnable("agent", search, tmp_path) is None
    moved.unlink()
    assert launch.unrunnable("agent", search, tmp_path) is not None


def test_a_program_named_by_path_that_is_not_executable_is_refused(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert launch.unrunnable("./run.sh", "", tmp_path) is None
    script.chmod(0o644)
    assert launch.unrunnable("./run.sh", "", tmp_path) == "[Errno 13] Permission denied: './run.sh'"


def test_placeholders_are_filled_in_one_pass_and_other_braces_are_kept(
    make_request: MakeRequest,
) -> None:
    request = make_request(instructions="quote {workspace} as is", todo_title="t {attempt}")
    args = ["agent", "{instructions}", "{todo_title}|{attempt}|{turn_id}", '{"json": {}}', "{x}"]
    assert launch.substitute(args, request) == [
        "agent",
        "quote {workspace} as is",
        f"t {{attempt}}|1|{request.turn_id}",
        '{"json": {}}',
        "{x}",
    ]
    plain = ["true", "--flag"]
    filled = launch.substitute(plain, request)
    assert filled == plain and filled is not plain  # the caller's list is never the one used
