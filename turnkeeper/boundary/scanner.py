"""Which files to look at, how they are read, and the report of what was found.

Three sources of files: what git would commit (the staged files, read from the index,
not the worktree: the index is what a commit takes), every tracked file (the whole
index), or paths given explicitly (read from disk; a directory is walked as git sees
it, ignored files left out). Each file's name and header are checked, then, unless it
is binary, its text line by line — at most its first :data:`MAX_SCAN_BYTES`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from turnkeeper.boundary.allow_list import (
    ALLOW_LIST_NAME,
    AllowedFinding,
    AllowList,
    load_allow_list,
)
from turnkeeper.boundary.rules import (
    TRANSCRIPT_PROBE_LINES,
    Finding,
    Kind,
    scan_header,
    scan_lines,
    scan_name,
    transcript_line_number,
)
from turnkeeper.errors import FailedPrecondition, NotFound

MAX_SCAN_BYTES = 2 * 1024 * 1024
# Git's own test for a binary file: a NUL byte among the first 8000.
_BINARY_PROBE = 8000
_GIT_TIMEOUT_S = 60.0

Progress = Callable[[int, int], None]


class ScanReport(BaseModel):
    """``findings`` are those no allow-list entry covers: a non-empty list fails."""

    findings: list[Finding]
    allowed: list[AllowedFinding]
    scanned: int
    binary: list[str]  # skipped: no text to scan (an SQLite file is still a finding)
    truncated: list[str]  # larger than MAX_SCAN_BYTES: only their start was scanned

    @property
    def ok(self) -> bool:
        return not self.findings


@dataclass(frozen=True)
class _Source:
    """One file to scan: its repository-relative name and how to read its bytes."""

    path: str
    read: Callable[[], bytes]


def scan_text(name: str, text: str) -> list[Finding]:
    """Everything :mod:`turnkeeper.boundary.rules` finds in ``text``, a file called
    ``name`` (its name counts too: ``rollout-1.jsonl``). No allow-list applies."""
    found = scan_name(name)
    if any(f.rule == "state_dir" for f in found):
        return found  # turnkeeper's own state: private whole, line by line adds nothing
    lines = text.split("\n", TRANSCRIPT_PROBE_LINES)[:TRANSCRIPT_PROBE_LINES]
    if not any(f.kind is Kind.TRANSCRIPT for f in found):
        number = transcript_line_number(lines)
        if number is not None:
            found.append(
                Finding(
                    path=name,
                    line=number,
                    kind=Kind.TRANSCRIPT,
                    rule="transcript_lines",
                    what="agent transcript (JSON lines of user/assistant messages)",
                    excerpt=name.rsplit("/", 1)[-1],
                    context=lines[number - 1],
                )
            )
    found.extend(scan_lines(name, text))
    return found


def _scan_bytes(name: str, data: bytes) -> tuple[list[Finding], bool]:
    """The findings in one file's bytes, and whether it was binary (not read as text)."""
    header = scan_header(name, data[:16])
    if header or b"\x00" in data[:_BINARY_PROBE]:
        return scan_name(name) + header, True
    if name == ALLOW_LIST_NAME:
        # The allow-list names what it allows (its ``match`` texts): it is reviewed
        # as configuration, not scanned as content.
        return [], False
    return scan_text(name, data.decode("utf-8", errors="replace")), False


def scan_sources(
    root: Path,
    sources: Iterable[_Source],
    *,
    allow_list: AllowList | None = None,
    progress: Progress | None = None,
) -> ScanReport:
    files = list(sources)
    allow = allow_list if allow_list is not None else load_allow_list(root)
    findings: list[Finding] = []
    allowed: list[AllowedFinding] = []
    binary: list[str] = []
    truncated: list[str] = []
    for done, source in enumerate(files, start=1):
        data = source.read()
        if len(data) > MAX_SCAN_BYTES:
            truncated.append(source.path)
            data = data[:MAX_SCAN_BYTES]
        found, is_binary = _scan_bytes(source.path, data)
        if is_binary:
            binary.append(source.path)
        for finding in found:
            reason = allow.reason_for(finding)
            if reason is None:
                findings.append(finding)
            else:
                allowed.append(AllowedFinding(**finding.model_dump(), reason=reason))
        if progress is not None:
            progress(done, len(files))
    return ScanReport(
        findings=findings,
        allowed=allowed,
        scanned=len(files),
        binary=binary,
        truncated=truncated,
    )


# --- files on disk ---------------------------------------------------------------------


def _relative(root: Path, path: Path) -> str:
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def _read_file(path: Path) -> Callable[[], bytes]:
    def read() -> bytes:
        with path.open("rb") as handle:
            # One byte past the limit: enough to know the file was cut.
            return handle.read(MAX_SCAN_BYTES + 1)

    return read


def _walk(root: Path, directory: Path) -> Iterator[Path]:
    """The files of ``directory`` git would see (tracked or not, not ignored) when it
    is in a work tree; otherwise every file below it but ``.git``."""
    listed = _git(directory, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    if listed is not None:
        for name in _split_z(listed):
            path = directory / name
            if path.is_file() and not path.is_symlink():
                yield path
        return
    for top, dirs, names in os.walk(directory):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in sorted(names):
            path = Path(top) / name
            if path.is_file() and not path.is_symlink():
                yield path


def scan_paths(
    root: Path,
    paths: Iterable[Path],
    *,
    allow_list: AllowList | None = None,
    progress: Progress | None = None,
) -> ScanReport:
    """Scan these files and directories (read from disk). Findings are named relative
    to ``root``, whose ``.turnkeeper-allow.toml`` applies unless ``allow_list`` is given."""
    root = root.resolve()
    sources: list[_Source] = []
    seen: set[Path] = set()
    for given in paths:
        if not given.exists():
            raise NotFound(f"no such file or directory: {given}", reason="no_such_path")
        found = _walk(root, given) if given.is_dir() else iter([given])
        for path in found:
            key = path.resolve()
            if key not in seen:
                seen.add(key)
                sources.append(_Source(_relative(root, path), _read_file(path)))
    return scan_sources(root, sources, allow_list=allow_list, progress=progress)


# --- files in git's index --------------------------------------------------------------


def _git(cwd: Path, *args: str) -> bytes | None:
    """``git ARGS`` output, or None when ``cwd`` is in no work tree (or git is absent).
    The environment is passed on whole: in a hook, ``GIT_INDEX_FILE`` names the index
    the commit is made from."""
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, timeout=_GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _split_z(output: bytes) -> list[str]:
    return [os.fsdecode(item) for item in output.split(b"\0") if item]


def repository_root(cwd: Path) -> Path:
    """The top of the work tree ``cwd`` is in; FAILED_PRECONDITION outside one."""
    out = _git(cwd, "rev-parse", "--show-toplevel")
    if out is None or not out.strip():
        raise FailedPrecondition(
            f"{cwd} is not inside a git work tree: give the files to scan as PATHs",
            reason="not_a_git_repository",
            details={"directory": str(cwd)},
        )
    return Path(os.fsdecode(out.strip()))


def _index_blobs(root: Path) -> dict[str, str]:
    """Every index entry with content: path -> blob id (files and symlinks; a
    submodule's commit has no content here)."""
    out = _git(root, "ls-files", "-s", "-z")
    blobs: dict[str, str] = {}
    for entry in (out or b"").split(b"\0"):
        if not entry:
            continue
        meta, _, name = entry.partition(b"\t")
        mode, blob, _stage = meta.split(b" ")
        if mode != b"160000":
            blobs[os.fsdecode(name)] = blob.decode()
    return blobs


class _BlobReader:
    """Blob contents from one ``git cat-file --batch``, read in order on demand."""

    def __init__(self, root: Path) -> None:
        self._proc = subprocess.Popen(
            ["git", "cat-file", "--batch"],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self._proc.stdin is not None  # both are pipes: asked for above
        assert self._proc.stdout is not None
        self._stdin, self._stdout = self._proc.stdin, self._proc.stdout

    def read(self, blob: str) -> bytes:
        self._stdin.write(blob.encode() + b"\n")
        self._stdin.flush()
        header = self._stdout.readline().split()
        if len(header) != 3:
            return b""  # "<id> missing": nothing to scan
        size = int(header[2])
        keep = self._stdout.read(min(size, MAX_SCAN_BYTES + 1))
        left = size - len(keep)
        while left > 0:  # the rest of a large blob is read past, unscanned
            left -= len(self._stdout.read(min(left, 1 << 20)))
        self._stdout.read(1)  # the newline after each object
        return keep

    def close(self) -> None:
        self._stdin.close()
        self._proc.wait(timeout=_GIT_TIMEOUT_S)


def scan_index(
    root: Path,
    *,
    staged_only: bool = True,
    allow_list: AllowList | None = None,
    progress: Progress | None = None,
) -> ScanReport:
    """Scan what git would commit from the work tree at ``root``: the files staged
    (added, changed, renamed; not deleted), or with ``staged_only=False`` every file
    in the index. Contents come from the index."""
    blobs = _index_blobs(root)
    if staged_only:
        out = _git(root, "diff", "--cached", "--name-only", "-z", "--diff-filter=d")
        names = [n for n in _split_z(out or b"") if n in blobs]
    else:
        names = sorted(blobs)
    reader = _BlobReader(root)
    try:
        sources = [_Source(name, _bind(reader, blobs[name])) for name in names]
        return scan_sources(root, sources, allow_list=allow_list, progress=progress)
    finally:
        reader.close()


def _bind(reader: _BlobReader, blob: str) -> Callable[[], bytes]:
    return lambda: reader.read(blob)
