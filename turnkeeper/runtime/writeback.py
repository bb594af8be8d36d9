"""Step 5 of the turn transaction: validate a turn's result and write it back to the goal.

The agent's word is not proof (seed 001: an executor's self-report cannot alone
prove completion). Evidence the agent names is run again here, in the
workspace, bound to the revision it ran on; the goal kernel then accepts or
rejects each proposal. Every write carries an id derived from the turn, so doing
the write-back twice — after a crash between the goal and the session commits —
applies it once.

The result a host returns (all keys optional)::

    {"summary": "...",
     "evidence": [{"key": "tests", "command": "pytest -q", "freshness_seconds": 3600}],
     "todo_done": true,
     "proposals": [<any kernel proposal as JSON>, ...]}
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from turnkeeper.errors import AlreadyExists, TurnkeeperError
from turnkeeper.kernel import GoalState, parse_proposal
from turnkeeper.kernel.proposals import CompleteTodo, Fence, RecordEvidence
from turnkeeper.kernel.session import ProposalDecision, TurnEnvelope
from turnkeeper.runtime.goals import GoalService
from turnkeeper.runtime.workspace import git_revision

EVIDENCE_TIMEOUT_SECONDS = 600
DEFAULT_FRESHNESS_SECONDS = 3600


def claim_owner(session_id: str) -> str:
    """The owner name a session's todo claims carry."""
    return f"session:{session_id}"


@dataclass
class WriteBackResult:
    accepted: list[ProposalDecision] = field(default_factory=list)
    rejected: list[ProposalDecision] = field(default_factory=list)


def write_back(
    goals: GoalService, envelope: TurnEnvelope, workspace: Path, result: Mapping[str, JsonValue]
) -> WriteBackResult:
    out = WriteBackResult()
    turn = envelope.turn_id
    evidence_ids = _record_evidence(goals, envelope, workspace, result, out)
    raw_proposals = result.get("proposals")
    for n, raw in enumerate(raw_proposals if isinstance(raw_proposals, list) else []):
        _apply(goals, envelope.goal_id, f"{turn}:proposal:{n}", raw, out)
    if result.get("todo_done") is True and envelope.todo_id is not None:
        _complete(goals, envelope, evidence_ids, out)
    return out


def _record_evidence(
    goals: GoalService,
    envelope: TurnEnvelope,
    workspace: Path,
    result: Mapping[str, JsonValue],
    out: WriteBackResult,
) -> list[str]:
    items = result.get("evidence")
    ids: list[str] = []
    known = goals.load(envelope.goal_id).evidence
    for n, item in enumerate(items if isinstance(items, list) else []):
        eid = f"ev-{envelope.turn_id}-{n}"
        pid = f"{envelope.turn_id}:evidence:{n}"
        if not isinstance(item, dict) or not isinstance(item.get("command"), str):
            out.rejected.append(ProposalDecision(proposal_id=pid, reason="malformed evidence item"))
            continue
        ids.append(eid)
        if eid in known:  # written back before a crash: the check does not run again
            out.accepted.append(ProposalDecision(proposal_id=pid, reason="already recorded"))
            continue
        command = str(item["command"])
        exit_code, digest = _run_check(command, workspace)
        freshness = item.get("freshness_seconds")
        if not isinstance(freshness, int):
            freshness = DEFAULT_FRESHNESS_SECONDS
        proposal = RecordEvidence(
            evidence_id=eid,
            command=command,
            key=str(item["key"]) if isinstance(item.get("key"), str) else None,
            revision=git_revision(workspace),
            exit_code=exit_code,
            output_digest=digest,
            freshness_seconds=freshness
            if isinstance(freshness, int)
            else DEFAULT_FRESHNESS_SECONDS,
        )
        _submit(goals, envelope.goal_id, pid, proposal, out)
    return ids


def _run_check(command: str, workspace: Path) -> tuple[int, str]:
    try:
        proc = subprocess.run(
            command,
            shell=True,
            cwd=workspace,
            capture_output=True,
            timeout=EVIDENCE_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"") + (exc.stderr or b"")
        return 124, hashlib.sha256(output).hexdigest()
    return proc.returncode, hashlib.sha256(proc.stdout + proc.stderr).hexdigest()


def _apply(goals: GoalService, goal_id: str, pid: str, raw: Any, out: WriteBackResult) -> None:
    try:
        proposal = parse_proposal(raw if isinstance(raw, dict) else {"kind": None})
    except TurnkeeperError as error:
        out.rejected.append(ProposalDecision(proposal_id=pid, reason=error.reason))
        return
    _submit(goals, goal_id, pid, proposal, out)


def _complete(
    goals: GoalService, envelope: TurnEnvelope, evidence_ids: list[str], out: WriteBackResult
) -> None:
    assert envelope.todo_id is not None
    pid = f"{envelope.turn_id}:complete"
    state: GoalState = goals.load(envelope.goal_id)
    todo = state.todos.get(envelope.todo_id)
    owner = claim_owner(envelope.session_id)
    if todo is not None and todo.completion is not None and todo.completion.owner == owner:
        out.accepted.append(ProposalDecision(proposal_id=pid, reason="already done"))
        return
    epoch = todo.claim.epoch if todo is not None and todo.claim is not None else 0
    proposal = CompleteTodo(
        todo_id=envelope.todo_id,
        fence=Fence(owner=owner, epoch=epoch),
        evidence_ids=evidence_ids,
    )
    _submit(goals, envelope.goal_id, pid, proposal, out)


def _submit(
    goals: GoalService, goal_id: str, pid: str, proposal: Any, out: WriteBackResult
) -> None:
    try:
        goals.submit(goal_id, proposal)
    except AlreadyExists:
        out.accepted.append(ProposalDecision(proposal_id=pid, reason="already applied"))
    except TurnkeeperError as error:
        # The kernel said no: recorded, not retried. The next turn sees the state.
        out.rejected.append(ProposalDecision(proposal_id=pid, reason=error.reason))
    else:
        out.accepted.append(ProposalDecision(proposal_id=pid))
