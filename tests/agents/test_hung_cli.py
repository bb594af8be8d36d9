"""A real agent CLI whose model server never answers is ended as hung, then suspended.

The pinned Codex CLI against a fake model server that opens every response stream and
then sends nothing more (the model never answers; with the provider's retries off,
Codex would wait out its own stream timeout of minutes). ``turnkeeper run
--silence-timeout 3`` sees no event and no CPU from the turn's processes, ends the
CLI's tree and fails the turn as ``hung`` within the timeout and a sample interval —
not at the one-hour host timeout; after ``--max-hangs 2`` such turns in a row the
session is suspended with that reason, and ``run`` says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.agents.conftest import MakeKit, marked
from tests.agents.fakes import Rule, Stall
from tests.agents.project import AgentProject

pytestmark = pytest.mark.timeout(180)


def test_a_cli_whose_model_never_answers_is_hung_then_suspended(
    make_kit: MakeKit, tmp_path: Path
) -> None:
    kit = make_kit("codex", [Rule("todo t-a", [Stall()] * 4)])
    project = AgentProject(tmp_path / "project", kit)
    try:
        plane = project.start_run("--silence-timeout", "3", "--max-hangs", "2", "--backoff", "0.1")
        # Suspended: run exits 12 (README, "Errors and exit codes").
        assert plane.wait(timeout=120) == 12, plane.output()
        lines = [json.loads(ln) for ln in plane.out.read_text().splitlines() if ln.strip()]
    finally:
        kit.server.release()
    summary = lines[-1]
    assert summary["stops"] == {project.session_id: "hung"}, summary
    assert summary["outcomes"] == {project.session_id: "suspended"}, summary
    failed = [r for r in lines if r.get("record") == "turn" and r.get("phase") == "failed"]
    assert [f["error_kind"] for f in failed] == ["hung", "hung"], failed
    for turn in failed:
        assert "no progress for 3 s" in turn["reason"], turn
        assert turn["elapsed_seconds"] < 15, turn
    # The model was asked (the CLI did start its turn), and never answered.
    assert kit.server.model_requests(), "the CLI never asked its model"
    session = project.session()
    assert (session.status.value, session.status_reason) == ("suspended", "hung")
    assert marked("TURNKEEPER_SESSION_ID", project.session_id) == {}
