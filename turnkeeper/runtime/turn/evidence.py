"""Run a command and record its result as evidence on a goal, bound to revision and time.

What ``turnkeeper evidence record GOAL -- CMD...`` does, as a service the Python API
calls too: the draft record is checked against the kernel's limits before the command
runs (what would be refused afterwards must not run it), the command runs in ``cwd``
with a bounded timeout, and its exit code, output digest and output tail go to the goal.
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from turnkeeper.errors import FailedPrecondition, InvalidArgument
from turnkeeper.kernel.limits import output_tail
from turnkeeper.kernel.model import Evidence
from turnkeeper.kernel.proposals import RecordEvidence, checked_input
from turnkeeper.runtime.services.goals import GoalService, Submitted, new_id
from turnkeeper.runtime.workspaces.tested_content import tested_tree
from turnkeeper.runtime.workspaces.workspace import git_revision

# The exit code recorded for a command that outlived its timeout (as GNU timeout does).
TIMEOUT_EXIT_CODE = 124


@dataclass(frozen=True)
class RecordedEvidence:
    """The record as the goal now holds it, the command's output, and the write."""

    evidence: Evidence
    output: bytes
    submitted: Submitted
    timed_out: bool = False


def record_command_evidence(
    goals: GoalService,
    goal_id: str,
    argv: Sequence[str],
    *,
    cwd: Path,
    key: str | None = None,
    freshness_seconds: int = 3600,
    timeout_seconds: float = 1800,
) -> RecordedEvidence:
    """Run ``argv`` in ``cwd`` and record its result on ``goal_id``."""
    if not argv:
        raise InvalidArgument("give the command to run", reason="missing_command")
    # Checked before the command runs: a wrong or closed goal must not cost a run.
    if goals.load(goal_id).is_closed:
        raise FailedPrecondition(
            f"goal {goal_id!r} is closed", reason="goal_closed", details={"goal_id": goal_id}
        )
    # Read before the command runs: what it tested, even if it changes files itself.
    revision = git_revision(cwd)
    tree = tested_tree(cwd)
    eid = new_id("ev")
    with checked_input():
        draft = RecordEvidence(
            evidence_id=eid,
            command=shlex.join(argv),
            key=key or None,
            revision=revision,
            tree=tree,
            exit_code=0,
            freshness_seconds=freshness_seconds,
        )
    timed_out = False
    try:
        proc = subprocess.run(
            list(argv), cwd=cwd, capture_output=True, timeout=timeout_seconds, check=False
        )
        exit_code, output = proc.returncode, proc.stdout + proc.stderr
    except FileNotFoundError as exc:
        raise InvalidArgument(f"cannot run {argv[0]!r}: {exc}", reason="command_not_found") from exc
    except OSError as exc:  # not executable, a directory, ...: refused, never a traceback
        raise InvalidArgument(
            f"cannot run {argv[0]!r}: {exc}", reason="command_not_runnable"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        timed_out = True
        exit_code = TIMEOUT_EXIT_CODE
        output = (exc.stdout or b"") + (exc.stderr or b"")
    proposal = draft.model_copy(
        update={
            "exit_code": exit_code,
            "output_digest": hashlib.sha256(output).hexdigest(),
            "output_tail": output_tail(output),
        }
    )
    done = goals.submit(goal_id, proposal)
    return RecordedEvidence(
        evidence=done.state.evidence[eid], output=output, submitted=done, timed_out=timed_out
    )
