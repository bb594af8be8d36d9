"""The brief's ``git status --porcelain`` read in this process (runtime/workspaces/status_lines.py).

Each test puts a real repository in a state (changes staged and not, files deleted,
renamed, untracked in nested directories, ignored, ``.turnkeeper/`` ignoring itself,
names git quotes, settings that change the lines) and compares the lines read through
libgit2 with what the real ``git status --porcelain`` prints there, line for line.
Where libgit2 would not say what git says (an unmerged path, an intent-to-add entry,
a submodule, a filter driver, a linked worktree, settings not read), the in-process
reader declines and the brief's probe asks git, whose lines it then shows. git
processes the probe starts are counted through a logging ``git`` on PATH
(tests/runtime/git_calls.py).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.runtime.git_calls import REAL_GIT, GitCalls, git, install
from turnkeeper.hosts.workspace_folder import workspace_folder
from turnkeeper.runtime.turn.brief import probe
from turnkeeper.runtime.workspaces.gitcmd import git_env
from turnkeeper.runtime.workspaces.status_lines import porcelain_lines

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def git_lines(repo: Path) -> list[str]:
    """What the real ``git status --porcelain`` prints in ``repo`` (as the brief ran
    it: gitcmd's environment, names that are not UTF-8 kept as surrogates)."""
    proc = subprocess.run(
        [REAL_GIT, "status", "--porcelain"],
        cwd=repo,
        env=git_env(),
        capture_output=True,
        text=True,
        errors="surrogateescape",
        check=True,
        timeout=60,
    )
    return proc.stdout.splitlines()


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GitCalls:
    # Configuration from the environment sends every question to git (libgit.py).
    for name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_PARAMETERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("GIT_CONFIG_COUNT", raising=False)
    return install(tmp_path, monkeypatch)


@pytest.fixture
def repo(tmp_path: Path, calls: GitCalls) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / ".gitignore").write_text("*.log\nbuild/\n")
    (path / ".gitattributes").write_text("*.crlf text eol=crlf\n")
    (path / "a.txt").write_text("alpha\n")
    (path / "b.txt").write_text("bravo\n")
    (path / "c.txt").write_text("charlie\n")
    (path / "f.txt").write_text("foxtrot\n")
    (path / "kept.txt").write_text("untracked by the user, kept on disk\n")
    (path / "run.sh").write_text("#!/bin/sh\n")
    (path / "mode.sh").write_text("#!/bin/sh\n")
    (path / "mode.sh").chmod(0o755)
    (path / "becomes-link.txt").write_text("a file, then a link\n")
    (path / "sub").mkdir()
    (path / "sub" / "d.txt").write_text("delta\n")
    (path / "story.txt").write_text("".join(f"line {n} of a long story\n" for n in range(40)))
    (path / "windows.crlf").write_bytes(b"one\r\ntwo\r\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "initial")
    calls.take()
    return path


def verbs(calls: GitCalls) -> list[str]:
    """The git subcommands started since the last look."""
    return [line.split()[0] for line in calls.take() if line.strip()]


def in_process(repo: Path) -> list[str]:
    lines = porcelain_lines(repo)
    assert lines is not None, "read in this process"
    return lines


def assert_same_as_git(repo: Path, calls: GitCalls) -> list[str]:
    """The lines read in this process equal git's (and, read so, started no git)."""
    calls.take()
    lines = in_process(repo)
    assert calls.take() == []
    assert lines == git_lines(repo)
    return lines


# --- states of a worktree ------------------------------------------------------------


def modified(repo: Path) -> None:
    (repo / "a.txt").write_text("alpha, changed\n")


def staged_then_changed(repo: Path) -> None:
    (repo / "b.txt").write_text("bravo, staged\n")
    git(repo, "add", "b.txt")
    (repo / "b.txt").write_text("bravo, staged, changed again\n")
    (repo / "new.txt").write_text("new, staged\n")
    (repo / "f.txt").write_text("foxtrot, staged\n")
    git(repo, "add", "new.txt", "f.txt")


def deleted(repo: Path) -> None:
    (repo / "c.txt").unlink()
    git(repo, "rm", "-q", "sub/d.txt")


def untracked_nested(repo: Path) -> None:
    (repo / "top.txt").write_text("untracked\n")
    (repo / "sub").mkdir(exist_ok=True)
    (repo / "sub" / "e.txt").write_text("untracked beside tracked\n")
    (repo / "fresh" / "deeper" / "still").mkdir(parents=True)
    (repo / "fresh" / "deeper" / "still" / "f.txt").write_text("one line for the dir\n")
    (repo / "empty").mkdir()  # an empty directory: git shows nothing


def ignored(repo: Path) -> None:
    (repo / "debug.log").write_text("ignored\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.bin").write_bytes(b"\0" * 64)
    (repo / "only-ignored").mkdir()
    (repo / "only-ignored" / "x.log").write_text("a directory of ignored files\n")
    (workspace_folder(repo) / "state").write_text("turnkeeper's own\n")


def renamed(repo: Path) -> None:
    git(repo, "mv", "run.sh", "sub/run.sh")  # unchanged
    git(repo, "mv", "story.txt", "tale.txt")
    with (repo / "tale.txt").open("a") as tale:
        tale.write("one more line\n")
    git(repo, "add", "tale.txt")
    (repo / "tale.txt").write_text("rewritten in the worktree after staging\n")


def unstaged_rename(repo: Path) -> None:
    (repo / "a.txt").rename(repo / "a-moved.txt")  # git: a deletion and an untracked


def index_deleted_kept(repo: Path) -> None:
    git(repo, "rm", "-q", "--cached", "kept.txt")  # ``D`` and ``??`` for one name


def type_and_mode(repo: Path) -> None:
    (repo / "becomes-link.txt").unlink()
    (repo / "becomes-link.txt").symlink_to("a.txt")
    (repo / "mode.sh").chmod(0o644)


def quoted_names(repo: Path) -> None:
    (repo / "with space.txt").write_text("quoted for its space\n")
    (repo / 'a "quote".txt').write_text("escaped\n")
    (repo / "tab\there.txt").write_text("escaped\n")
    (repo / "café.txt").write_text("octal escapes\n")
    (repo / "spaced dir").mkdir()
    (repo / "spaced dir" / "x").write_text("a directory's line, quoted\n")
    os.makedirs(os.fsencode(repo) + b"/latin\xe9", exist_ok=True)
    with open(os.fsencode(repo) + b"/latin\xe9/not-utf8-\xff.txt", "w") as handle:
        handle.write("a name that is not UTF-8\n")
    with open(os.fsencode(repo) + b"/raw-\xfe.txt", "w") as handle:
        handle.write("a name that is not UTF-8\n")


def line_endings(repo: Path) -> None:
    (repo / "windows.crlf").write_bytes(b"one\ntwo\n")  # the same once normalised


def nested_repository(repo: Path) -> None:
    nested = repo / "vendored"
    nested.mkdir()
    git(nested, "init", "-q")
    (nested / "inner.txt").write_text("a repository of its own\n")


STATES: list[Callable[[Path], None]] = [
    modified,
    staged_then_changed,
    deleted,
    untracked_nested,
    renamed,
    unstaged_rename,
    index_deleted_kept,
    type_and_mode,
    quoted_names,
    line_endings,
    nested_repository,
]


def test_a_clean_worktree_has_no_lines(repo: Path, calls: GitCalls) -> None:
    assert assert_same_as_git(repo, calls) == []


@pytest.mark.parametrize("state", STATES, ids=lambda f: f.__name__)
def test_each_state_reads_as_git_prints_it(
    repo: Path, calls: GitCalls, state: Callable[[Path], None]
) -> None:
    state(repo)
    assert assert_same_as_git(repo, calls), "the state changed something git shows"


def test_ignored_files_and_turnkeepers_folder_show_no_line(repo: Path, calls: GitCalls) -> None:
    ignored(repo)
    assert assert_same_as_git(repo, calls) == []


def test_every_state_at_once_reads_as_git_prints_it(repo: Path, calls: GitCalls) -> None:
    ignored(repo)
    for state in STATES:
        state(repo)
    lines = assert_same_as_git(repo, calls)
    codes = {line[:2] for line in lines}
    assert {" M", "M ", "MM", "A ", " D", "D ", "R ", "RM", " T", "??"} <= codes


def test_an_unborn_branch_reads_as_git_prints_it(tmp_path: Path, calls: GitCalls) -> None:
    path = tmp_path / "unborn"
    path.mkdir()
    git(path, "init", "-q")
    (path / "staged.txt").write_text("staged before any commit\n")
    git(path, "add", "staged.txt")
    (path / "loose.txt").write_text("untracked\n")
    assert assert_same_as_git(path, calls) == ["A  staged.txt", "?? loose.txt"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("status.showUntrackedFiles", "no"),
        ("status.showUntrackedFiles", "all"),
        ("core.quotePath", "false"),
        ("status.renames", "false"),
        ("diff.renames", "false"),
    ],
)
def test_settings_that_change_the_lines_are_read(
    repo: Path, calls: GitCalls, name: str, value: str
) -> None:
    git(repo, "config", name, value)
    untracked_nested(repo)
    quoted_names(repo)
    renamed(repo)
    assert assert_same_as_git(repo, calls)


# --- what is left to git -------------------------------------------------------------


def conflicted(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "theirs")
    (repo / "a.txt").write_text("theirs\n")
    git(repo, "commit", "-qam", "theirs")
    git(repo, "checkout", "-q", "main")
    (repo / "a.txt").write_text("ours\n")
    git(repo, "commit", "-qam", "ours")
    subprocess.run(
        [REAL_GIT, "-c", "user.email=t@example.com", "-c", "user.name=t", "merge", "theirs"],
        cwd=repo,
        capture_output=True,
        check=False,
        timeout=60,
    )


def intent_to_add(repo: Path) -> None:
    (repo / "later.txt").write_text("added with --intent-to-add\n")
    git(repo, "add", "-N", "later.txt")


def submodule(repo: Path) -> None:
    inner = repo / "inner"
    inner.mkdir()
    git(inner, "init", "-q")
    (inner / "x.txt").write_text("x\n")
    git(inner, "add", "x.txt")
    git(inner, "commit", "-qm", "inner")
    git(repo, "add", "inner")  # a gitlink, no .gitmodules
    git(repo, "commit", "-qm", "gitlink")
    (inner / "x.txt").write_text("changed inside\n")


def gitmodules(repo: Path) -> None:
    (repo / ".gitmodules").write_text('[submodule "none"]\n\tpath = none\n')
    modified(repo)


def filter_driver(repo: Path) -> None:
    git(repo, "config", "filter.upper.clean", "tr a-z A-Z")
    modified(repo)


def worktree_setting(repo: Path) -> None:
    git(repo, "config", "core.worktree", str(repo))  # git would read it; libgit2 opens bare
    modified(repo)


def copies_setting(repo: Path) -> None:
    git(repo, "config", "diff.renames", "copies")
    renamed(repo)


def rename_limit(repo: Path) -> None:
    git(repo, "config", "status.renameLimit", "1")
    renamed(repo)


LEFT_TO_GIT: list[Callable[[Path], None]] = [
    conflicted,
    intent_to_add,
    submodule,
    gitmodules,
    filter_driver,
    worktree_setting,
    copies_setting,
    rename_limit,
]


@pytest.mark.parametrize("state", LEFT_TO_GIT, ids=lambda f: f.__name__)
def test_what_libgit2_would_say_otherwise_is_left_to_git(
    repo: Path, calls: GitCalls, state: Callable[[Path], None]
) -> None:
    state(repo)
    assert porcelain_lines(repo) is None
    calls.take()
    shown = probe(repo, NOW)
    assert verbs(calls).count("status") == 1
    expected = git_lines(repo)
    assert expected, "the state changed something git shows"
    assert shown.changed == expected[: len(shown.changed)]
    assert shown.dirty is True


def test_configuration_from_the_environment_is_left_to_git(
    repo: Path, calls: GitCalls, monkeypatch: pytest.MonkeyPatch
) -> None:
    modified(repo)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "0")
    assert porcelain_lines(repo) is None


def test_a_linked_worktree_is_left_to_git(repo: Path, tmp_path: Path, calls: GitCalls) -> None:
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", str(linked))
    (linked / "a.txt").write_text("changed in the linked worktree\n")
    (linked / "new.txt").write_text("untracked there\n")
    assert porcelain_lines(linked) is None
    calls.take()
    shown = probe(linked, NOW)
    assert verbs(calls).count("status") == 1
    assert shown.changed == git_lines(linked) == [" M a.txt", "?? new.txt"]


# --- the brief's probe -----------------------------------------------------------------


def test_the_probe_shows_gits_lines_and_starts_no_git(repo: Path, calls: GitCalls) -> None:
    for state in (modified, staged_then_changed, untracked_nested, ignored, renamed):
        state(repo)
    head = git(repo, "rev-parse", "HEAD")
    probe(repo, NOW)  # the first look may ask git for HEAD; its answer is kept
    calls.take()
    shown = probe(repo, NOW)
    assert calls.take() == []
    assert shown.changed == git_lines(repo)
    assert shown.dirty is True and shown.revision == head and shown.changed_more == 0


def test_a_clean_workspace_probes_clean(repo: Path, calls: GitCalls) -> None:
    shown = probe(repo, NOW)
    assert shown.dirty is False and shown.changed == []


def test_a_directory_outside_any_repository_starts_no_git(tmp_path: Path, calls: GitCalls) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "file.txt").write_text("no repository here\n")
    if any((parent / ".git").exists() for parent in plain.parents):
        pytest.skip("the temporary directory is inside a repository")
    shown = probe(plain, NOW)
    assert calls.take() == []
    assert shown.dirty is None and shown.changed == [] and shown.revision is None
