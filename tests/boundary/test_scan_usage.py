"""``turnkeeper scan`` and the pre-commit hook, used as a user does: a real git
repository, ``turnkeeper init --hooks``, ``git add`` and a real ``git commit``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.boundary import fakes
from tests.usage.project import UserProject

FAILED_PRECONDITION = 6
INVALID_ARGUMENT = 3
NOT_FOUND = 4


def commit(project: UserProject, message: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A real ``git commit``: the hook runs as it would for the user."""
    return subprocess.run(
        ["git", "commit", "-m", message, *args],
        cwd=project.root,
        env=project.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def flat(text: str) -> str:
    """Terminal text as one line (Rich wraps long messages at its width)."""
    return " ".join(text.split())


def commits(project: UserProject) -> int:
    return int(project.git("rev-list", "--count", "HEAD").strip())


def plant(project: UserProject) -> str:
    """A credential, an absolute path and a transcript, staged; returns the key."""
    key = fakes.openai_key()
    (project.root / "settings.py").write_text(f'# settings\nOPENAI_API_KEY = "{key}"\n')
    (project.root / "notes.md").write_text(f"# Notes\n\nsee {fakes.home_path()}\n")
    (project.root / "rollout-2026-01-01.jsonl").write_text(fakes.transcript_lines())
    project.git("add", "settings.py", "notes.md", "rollout-2026-01-01.jsonl")
    return key


def test_a_commit_with_private_things_is_refused_until_they_are_gone(
    user_project: UserProject,
) -> None:
    project = user_project
    done = project.tk("init", "--hooks")
    assert "pre-commit hook installed" in done.stdout
    hook = project.root / ".git" / "hooks" / "pre-commit"
    assert hook.read_text().startswith("#!/bin/sh\n")
    key = plant(project)

    scan = project.tk("scan", expect=FAILED_PRECONDITION)
    lines = scan.stdout.splitlines()
    assert "settings.py:2: credential: OpenAI API key (sk-p…)" in lines
    assert f"notes.md:3: local_path: path in a home directory ({fakes.home_path()})" in lines
    assert any(line.startswith("rollout-2026-01-01.jsonl:0: transcript: ") for line in lines), (
        scan.stdout
    )
    assert "FAILED_PRECONDITION (scan_findings)" in scan.stderr
    assert key not in scan.stdout + scan.stderr

    before = commits(project)
    refused = commit(project, "add settings")
    assert refused.returncode != 0
    assert "settings.py:2: credential" in refused.stdout + refused.stderr
    assert key not in refused.stdout + refused.stderr
    assert commits(project) == before
    assert project.git("diff", "--cached", "--name-only").split() != []  # still staged

    # Keep the path, on purpose and saying why; take the other two back out.
    project.git("rm", "-q", "--cached", "settings.py", "rollout-2026-01-01.jsonl")
    (project.root / "settings.py").unlink()
    (project.root / "rollout-2026-01-01.jsonl").unlink()
    (project.root / ".turnkeeper-allow.toml").write_text(
        '[[allow]]\npath = "notes.md"\nkind = "local_path"\nmatch = "/alice/"\n'
        'reason = "the example machine of the notes"\n'
    )
    project.git("add", ".turnkeeper-allow.toml")
    passed = project.tk("scan")
    assert "allowed: notes.md:3: local_path:" in passed.stdout
    assert "the example machine of the notes" in passed.stdout
    made = commit(project, "add notes")
    assert made.returncode == 0, made.stdout + made.stderr
    assert commits(project) == before + 1
    assert project.git("show", "--name-only", "--format=", "HEAD").split() == [
        ".turnkeeper-allow.toml",
        "notes.md",
    ]


def test_scan_json_shape_and_the_secret_is_never_printed_whole(
    user_project: UserProject,
) -> None:
    project = user_project
    key = plant(project)
    done = project.tk("scan", "--json", expect=FAILED_PRECONDITION)
    report = done.json()
    assert {"findings", "allowed", "scanned"} <= set(report)
    assert report["scanned"] == 3
    assert report["allowed"] == []
    assert report["error"]["code"] == "FAILED_PRECONDITION"
    assert report["error"]["reason"] == "scan_findings"
    by_path = {f["path"]: f for f in report["findings"]}
    assert set(by_path) == {"settings.py", "notes.md", "rollout-2026-01-01.jsonl"}
    for finding in report["findings"]:
        assert {"path", "line", "kind", "rule", "excerpt"} <= set(finding)
    assert (by_path["settings.py"]["line"], by_path["settings.py"]["kind"]) == (2, "credential")
    assert by_path["settings.py"]["excerpt"] == key[:4] + "…"
    assert by_path["notes.md"]["kind"] == "local_path"
    assert by_path["rollout-2026-01-01.jsonl"]["kind"] == "transcript"
    for args in (("scan", "--json"), ("scan",), ("scan", "--all"), ("scan", ".")):
        shown = project.tk(*args, expect=FAILED_PRECONDITION)
        assert key not in shown.stdout + shown.stderr
        assert key[:12] not in shown.stdout + shown.stderr


def test_an_allow_entry_without_a_reason_is_a_clear_error(user_project: UserProject) -> None:
    project = user_project
    plant(project)
    allow = project.root / ".turnkeeper-allow.toml"
    allow.write_text(
        '[[allow]]\npath = "settings.py"\nreason = "a test key"\n\n[[allow]]\npath = "notes.md"\n'
    )
    done = project.tk("scan", expect=INVALID_ARGUMENT)
    assert "INVALID_ARGUMENT (allow_list_invalid)" in done.stderr
    assert "allow entry 2 (path 'notes.md') has no reason" in flat(done.stderr)
    assert "Traceback" not in done.stderr
    assert project.tk_json("scan", expect=INVALID_ARGUMENT)["error"]["details"]["entry"] == 2
    for text, said in [
        ('[[allow]]\npath = "x"\nreason = "  "\n', "has no reason"),
        ('[[allow]]\npath = "x"\nkind = "secret"\nreason = "r"\n', "kind"),
        ('[[allow]]\npath = "x"\nline = -1\nreason = "r"\n', "line"),
        ('[[allow]]\npath = "x"\nreasons = "r"\nreason = "r"\n', "reasons"),
        ("[[allow]\n", "not valid TOML"),
        ('allowed = ["x"]\n', "unknown key"),
    ]:
        allow.write_text(text)
        bad = project.tk("scan", expect=INVALID_ARGUMENT)
        assert said in flat(bad.stderr) and "allow_list_invalid" in bad.stderr, (text, bad.stderr)
        assert "Traceback" not in bad.stderr


def test_what_is_committed_is_what_is_scanned(user_project: UserProject) -> None:
    """The index, not the worktree: a secret staged then edited away is still refused,
    and ``git commit -a`` (a temporary index) is scanned as well."""
    project = user_project
    project.tk("init", "--hooks")
    key = fakes.github_token()
    config = project.root / "config.toml"
    config.write_text(f'token = "{key}"\n')
    project.git("add", "config.toml")
    config.write_text('token = "set me"\n')
    assert "config.toml:1: credential: GitHub token" in project.tk("scan", expect=6).stdout
    project.git("add", "config.toml")  # the clean version staged: fine now
    assert commit(project, "config").returncode == 0
    config.write_text(f'token = "{key}"\n')
    before = commits(project)
    refused = commit(project, "leak", "-a")
    assert refused.returncode != 0 and "GitHub token" in refused.stdout + refused.stderr
    assert commits(project) == before
    assert project.tk("scan", "--all").returncode == 0  # the index holds the clean one


def test_databases_binaries_large_files_and_directories(user_project: UserProject) -> None:
    project = user_project
    data = project.root / "data"
    data.mkdir()
    shutil.copy(project.database, data / "cache.db")
    (data / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00" + fakes.openai_key().encode())
    key = fakes.aws_key_id()
    big = data / "big.txt"
    big.write_text("x" * 100 + "\n" + ("filler line\n" * 200_000) + key + "\n")
    assert big.stat().st_size > 2 * 1024 * 1024
    project.git("add", "data")
    report = project.tk_json("scan", expect=FAILED_PRECONDITION)
    assert [(f["path"], f["rule"], f["line"]) for f in report["findings"]] == [
        ("data/cache.db", "sqlite_database", 0)
    ]
    assert set(report["binary"]) == {"data/cache.db", "data/image.png"}
    assert report["truncated"] == ["data/big.txt"]  # its key lies past 2 MiB
    text = project.tk("scan", "--all", expect=FAILED_PRECONDITION)
    assert "data/big.txt is over 2 MiB" in flat(text.stderr)

    # Directories are walked as git sees them: the ignored debug.log is left out there,
    # scanned when named; a file outside the repository is named as given.
    walked = project.tk_json("scan", ".", expect=FAILED_PRECONDITION)
    paths = {f["path"] for f in walked["findings"]}
    assert "debug.log" not in paths and not any(p.startswith(".turnkeeper/") for p in paths)
    named = project.tk_json("scan", "debug.log", expect=FAILED_PRECONDITION)
    assert [f["rule"] for f in named["findings"]] == ["log_file"]
    outside = project.root.parent / "outside.md"
    outside.write_text("nothing private\n")
    clean = project.tk_json("scan", str(outside))
    assert clean["findings"] == [] and clean["scanned"] == 1


def test_bad_input_is_a_typed_error(user_project: UserProject, tmp_path: Path) -> None:
    project = user_project
    both = project.tk("scan", "--all", "README.md", expect=INVALID_ARGUMENT)
    assert "conflicting_arguments" in both.stderr
    missing = project.tk("scan", "no-such-file.txt", expect=NOT_FOUND)
    assert "no_such_path" in missing.stderr
    elsewhere = tmp_path / "not-a-repo"
    elsewhere.mkdir()
    outside = subprocess.run(
        [*_turnkeeper(), "scan"],
        cwd=elsewhere,
        env=project.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert outside.returncode == FAILED_PRECONDITION
    assert "not_a_git_repository" in outside.stderr and "Traceback" not in outside.stderr
    hooks = subprocess.run(
        [*_turnkeeper(), "init", "--hooks", str(elsewhere)],
        cwd=elsewhere,
        env=project.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert hooks.returncode == FAILED_PRECONDITION, hooks.stderr
    assert "not_a_git_repository" in hooks.stderr
    assert not (elsewhere / ".turnkeeper").exists()  # refused before anything was made
    assert project.tk("scan", "--all").returncode == 0  # the user's own files are clean


def test_a_hook_of_the_users_own_is_left_alone(user_project: UserProject) -> None:
    project = user_project
    hook = project.root / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    done = project.tk("init", "--hooks")
    assert "is not turnkeeper's: left as it is" in flat(done.stdout)
    assert "-m turnkeeper.cli.main scan || exit 1\n" in done.stdout
    assert hook.read_text() == "#!/bin/sh\nexit 0\n"
    hook.unlink()
    first = project.tk_json("init", "--hooks")
    assert first["hook"]["status"] == "installed"
    again = project.tk_json("init", "--hooks")
    assert again["hook"]["status"] == "unchanged"
    assert "hook" not in project.tk_json("init")


def _turnkeeper() -> list[str]:
    from tests.usage.project import turnkeeper_executable

    return turnkeeper_executable()
