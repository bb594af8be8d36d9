"""What a snapshot ref claims, against what the log holds (runtime/services/workspace_claims.py).

Real snapshots in a real repository and a real store; the session is given as the
projection JSON ``status`` hands over. A ref one completed turn ahead is what a crash
between taking a snapshot and committing its turn leaves, so it is not "behind"; any
claim beyond that is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.runtime.test_snapshot_repositories import new_repo
from tests.store.toy import add
from turnkeeper.errors import DataLoss
from turnkeeper.runtime.services import workspace_claims
from turnkeeper.runtime.services.goals import goal_stream
from turnkeeper.runtime.workspaces.snapshots import SnapshotClaims, capture
from turnkeeper.store import SqlEventStore, open_store

SID = "00000000-0000-4000-8000-0000000000bb"


def _session(repo: Path, completed: int, accepted: int) -> dict[str, Any]:
    return {
        "session_id": SID,
        "goal_id": "g",
        "workspace": str(repo),
        "snapshots": True,
        "counters": {"turns_completed": completed, "turns_accepted": accepted},
    }


@pytest.fixture
def store(tmp_path: Path) -> SqlEventStore:
    opened = open_store(tmp_path / "log.db")
    add(opened, goal_stream("g"), [1, 2, 3])  # the goal stream's head: 3
    return opened


def test_the_goal_stream_is_named_as_the_goal_service_names_it() -> None:
    assert goal_stream("g1") == workspace_claims.GOAL_STREAM_PREFIX + "g1"


def test_claims_beyond_the_log_are_behind_and_one_turn_ahead_is_not(
    tmp_path: Path, store: SqlEventStore
) -> None:
    repo = new_repo(tmp_path)
    for n in (1, 2):
        (repo / f"turn{n}.txt").write_text(f"{n}\n")
        claims = SnapshotClaims(turns_accepted=n, goal_seq=n + 1)
        assert capture(repo, SID, f"turn-{n}", n, None, claims=claims) is not None

    # Up to date, and a crash after the second snapshot before its completion.
    assert workspace_claims.workspace_claims_beyond_log(store, [_session(repo, 2, 2)]) == []
    assert workspace_claims.workspace_claims_beyond_log(store, [_session(repo, 1, 2)]) == []
    # Two completed turns the log never heard of.
    behind = workspace_claims.workspace_claims_beyond_log(store, [_session(repo, 0, 0)])
    assert [(b.claim.ordinal, b.claim.turn_id) for b in behind] == [(1, "turn-1"), (2, "turn-2")]
    assert behind[1].as_json()["log"] == {"turns_completed": 0, "turns_accepted": 0, "goal_seq": 3}
    # The second turn's acceptance lost although its ordinal is in reach.
    late = workspace_claims.workspace_claims_beyond_log(store, [_session(repo, 1, 1)])
    assert [b.claim.turn_id for b in late] == ["turn-2"]

    with pytest.raises(DataLoss) as err:
        workspace_claims.check_workspaces_not_ahead(store, [_session(repo, 0, 0)])
    assert err.value.reason == "database_behind_workspace"
    assert f"turnkeeper repair --accept-loss {SID}" in err.value.message
    listed = err.value.details["behind"]
    assert isinstance(listed, list) and isinstance(listed[0], dict)
    assert listed[0]["ref"].endswith("00000001-turn-1")


def test_a_goal_head_behind_the_snapshot_is_behind(tmp_path: Path, store: SqlEventStore) -> None:
    repo = new_repo(tmp_path)
    claims = SnapshotClaims(turns_accepted=1, goal_seq=4)  # the log's goal head is 3
    assert capture(repo, SID, "turn-1", 1, None, claims=claims) is not None
    behind = workspace_claims.workspace_claims_beyond_log(store, [_session(repo, 1, 1)])
    assert [b.claim.goal_seq for b in behind] == [4]


def test_sessions_without_snapshots_or_a_repository_claim_nothing(
    tmp_path: Path, store: SqlEventStore
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    off = {**_session(plain, 0, 0), "snapshots": False}
    gone = _session(tmp_path / "gone", 0, 0)
    assert workspace_claims.workspace_claims_beyond_log(store, [off, gone, {"x": 1}]) == []
