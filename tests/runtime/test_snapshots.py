"""Workspace snapshots at every completed turn (runtime/workspaces/snapshots.py).

A snapshot's tree equals a tree of the same files built independently; tracked and
untracked-but-not-ignored files are in it, ignored ones and ``.turnkeeper/`` are not;
the user's HEAD, branch, index (staged changes included) and stash are untouched;
retention prunes refs and artifact copies; the control plane records one snapshot
per completed turn and ``session snapshots`` lists them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from tests.runtime.crash_support import make_project, standard_script
from turnkeeper.runtime.workspaces.snapshots import (
    REF_PREFIX,
    capture,
    copy_dir,
    prune,
    session_refs,
    sha256_file,
    snapshot_name,
    workspace_tree,
)

SID = "00000000-0000-4000-8000-000000000001"


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.stdout


def user_state(repo: Path) -> dict[str, str]:
    """Everything of the user's a snapshot must leave alone."""
    return {
        "head": git(repo, "rev-parse", "HEAD"),
        "branch": git(repo, "symbolic-ref", "HEAD"),
        "index": hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest(),
        "staged": git(repo, "diff", "--cached"),
        "stash": git(repo, "stash", "list"),
        "refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads"),
        # --no-optional-locks: status must not refresh (rewrite) the index it checks.
        "status": "".join(
            line
            for line in git(
                repo, "--no-optional-locks", "status", "--porcelain", "--untracked-files=all"
            ).splitlines(keepends=True)
            if not line.startswith("?? .turnkeeper/")  # the snapshot's own artifact copy
        ),
    }


def dirty_repo(root: Path) -> Path:
    """A repo with a commit, a stash entry, a staged change, an unstaged change, an
    untracked file, an ignored file, a tracked-but-ignored file and ``.turnkeeper/``."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "tracked.txt").write_text("one\n")
    (repo / "sub").mkdir()
    (repo / "sub" / "keep.txt").write_text("keep\n")
    (repo / "forced.log").write_text("tracked although ignored\n")
    git(repo, "add", ".gitignore", "tracked.txt", "sub/keep.txt")
    git(repo, "add", "-f", "forced.log")
    git(repo, "commit", "-qm", "initial")
    (repo / "tracked.txt").write_text("stashed\n")
    git(repo, "stash", "push", "-q")
    (repo / "staged.txt").write_text("staged\n")
    git(repo, "add", "staged.txt")
    (repo / "tracked.txt").write_text("two\n")  # unstaged modification
    (repo / "untracked.txt").write_text("new\n")
    (repo / "debug.log").write_text("ignored\n")
    (repo / ".turnkeeper").mkdir()
    (repo / ".turnkeeper" / "private").write_text("turnkeeper state\n")
    return repo


def independent_tree(repo: Path, files: list[str], scratch: Path) -> str:
    """The tree of ``files`` as they are in ``repo``, built in a repository of its own."""
    scratch.mkdir()
    git(scratch, "init", "-q")
    for name in files:
        (scratch / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, scratch / name)
    git(scratch, "add", "-f", "-A")
    return git(scratch, "write-tree").strip()


EXPECTED_FILES = [
    ".gitignore",
    "forced.log",
    "staged.txt",
    "sub/keep.txt",
    "tracked.txt",
    "untracked.txt",
]


def test_snapshot_tree_matches_workspace_and_leaves_user_state_alone(tmp_path: Path) -> None:
    repo = dirty_repo(tmp_path)
    artifact = tmp_path / "host" / "session.jsonl"
    artifact.parent.mkdir()
    artifact.write_text('{"type": "session.created"}\n')
    before = user_state(repo)

    snap = capture(repo, SID, "turn-1", 1, artifact)

    assert snap is not None
    assert user_state(repo) == before
    listed = git(repo, "ls-tree", "-r", "--name-only", snap.tree).split()
    assert sorted(listed) == EXPECTED_FILES  # no debug.log, no .turnkeeper/
    assert snap.tree == independent_tree(repo, EXPECTED_FILES, tmp_path / "scratch")
    assert git(repo, "rev-parse", f"{snap.commit}^{{tree}}").strip() == snap.tree
    assert git(repo, "rev-parse", f"{snap.commit}^").strip() == before["head"].strip()
    assert git(repo, "rev-parse", snap.ref).strip() == snap.commit
    assert snap.ref == f"{REF_PREFIX}/{SID}/{snapshot_name(1, 'turn-1')}"
    assert snap.artifact_copy is not None
    copy = Path(snap.artifact_copy)
    assert copy.read_bytes() == artifact.read_bytes()
    assert snap.artifact_digest == sha256_file(artifact)
    assert copy.parent == copy_dir(repo, SID, snapshot_name(1, "turn-1"))
    # The copy lives under .turnkeeper/, which no snapshot includes.
    assert workspace_tree(repo) == snap.tree


def test_snapshot_without_head_and_outside_a_repository(tmp_path: Path) -> None:
    repo = tmp_path / "fresh"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("a\n")
    snap = capture(repo, SID, "turn-1", 1, None)
    assert snap is not None and snap.artifact_copy is None
    assert git(repo, "ls-tree", "-r", "--name-only", snap.tree).split() == ["a.txt"]
    assert git(repo, "status", "--porcelain").strip() == "?? a.txt"  # index untouched
    plain = tmp_path / "plain"
    plain.mkdir()
    assert capture(plain, SID, "turn-1", 1, None) is None


def test_retention_prunes_refs_and_copies(tmp_path: Path) -> None:
    repo = dirty_repo(tmp_path)
    artifact = tmp_path / "session.jsonl"
    for n in range(1, 6):
        artifact.write_text(f"line {n}\n")
        (repo / "untracked.txt").write_text(f"{n}\n")
        capture(repo, SID, f"turn-{n}", n, artifact, retain=2)
    refs = [ref for ref, _ in session_refs(repo, SID)]
    assert refs == [f"{REF_PREFIX}/{SID}/{snapshot_name(n, f'turn-{n}')}" for n in (4, 5)]
    kept = sorted(p.name for p in (repo / ".turnkeeper" / "snapshots" / SID).iterdir())
    assert kept == [snapshot_name(n, f"turn-{n}") for n in (4, 5)]
    assert prune(repo, SID, 1) == [refs[0]]
    assert [ref for ref, _ in session_refs(repo, SID)] == refs[1:]


def test_every_completed_turn_records_a_snapshot(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", standard_script())
    try:
        project.run_control_plane()
        state = project.session()
        assert state.counters.turns_completed == 2
        last = state.last_completed
        assert last is not None
        snap = last.snapshot
        assert snap.workspace_tree == workspace_tree(project.repo)
        assert snap.workspace_commit is not None and snap.snapshot_ref is not None
        # The scripted host's session file is the host artifact; its copy matches it.
        live = project.host_state / "sessions" / f"{state.host_session_handle}.jsonl"
        assert snap.host_artifact_path == str(live.resolve())
        assert snap.host_artifact_copy is not None
        assert Path(snap.host_artifact_copy).read_bytes() == live.read_bytes()
        assert snap.host_artifact_digest == sha256_file(live)
        listed = project.cli("session", "snapshots", project.session_id, "--json").json()
        rows = listed["snapshots"]
        assert [r["turn_id"] for r in rows] == [
            t for t, h in project.turns().items() if h.terminal == "turn.completed"
        ]
        assert all(r["retained"] for r in rows)
        assert rows[-1]["workspace_tree"] == snap.workspace_tree
        text = project.cli("session", "snapshots", project.session_id)
        assert "snapshots of session" in text.stdout
        names = json.dumps(rows)
        assert "b.txt" not in names  # file names live in the tree, not the record
    finally:
        project.cleanup()


def test_assume_unchanged_entries_do_not_hide_changes(tmp_path: Path) -> None:
    repo = dirty_repo(tmp_path)
    git(repo, "update-index", "--assume-unchanged", "tracked.txt")
    (repo / "tracked.txt").write_text("changed behind git's back\n")
    snap = capture(repo, SID, "turn-1", 1, None)
    assert snap is not None
    blob = git(repo, "show", f"{snap.tree}:tracked.txt")
    assert blob == "changed behind git's back\n"
    assert snap.tree == independent_tree(repo, EXPECTED_FILES, tmp_path / "scratch")
