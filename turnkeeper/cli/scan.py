"""``turnkeeper scan``: refuse to publish what is private (docs/boundary.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from turnkeeper.cli.context import JsonOption, handles_errors
from turnkeeper.cli.output import err_console, print_json, visible
from turnkeeper.errors import FailedPrecondition, InvalidArgument

# The boundary package (pydantic) is imported when the command runs: --help stays light.
if TYPE_CHECKING:
    from turnkeeper.boundary import ScanReport

# Fewer files than this are scanned before a progress bar would be worth drawing.
_PROGRESS_FROM = 200


@contextmanager
def _progress() -> Iterator[Callable[[int, int], None] | None]:
    """A file count on stderr while many files are scanned, on a terminal only."""
    if not err_console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

    bar = Progress(
        TextColumn("scanning"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("files"),
        console=err_console,
        transient=True,
    )
    task: list[TaskID] = []

    def advance(done: int, total: int) -> None:
        if total < _PROGRESS_FROM:
            return
        if not task:
            bar.start()
            task.append(bar.add_task("scanning", total=total))
        bar.update(task[0], completed=done)

    try:
        yield advance
    finally:
        bar.stop()


def _line(path: str, line: int, kind: str, what: str, excerpt: str) -> str:
    return visible(f"{path}:{line}: {kind}: {what} ({excerpt})")


def _print_text(report: ScanReport) -> None:
    for f in report.findings:
        print(_line(f.path, f.line, f.kind.value, f.what, f.excerpt))
    for a in report.allowed:
        allowed = _line(a.path, a.line, a.kind.value, a.what, a.excerpt)
        print(f"allowed: {allowed}: {visible(a.reason)}")
    for path in report.truncated:
        err_console.print(
            f"note: {visible(path)} is over 2 MiB: only its first 2 MiB were scanned",
            markup=False,
        )
    files = "file" if report.scanned == 1 else "files"
    print(
        f"scanned {report.scanned} {files}: {len(report.findings)} not allowed, "
        f"{len(report.allowed)} allowed"
    )


@handles_errors
def scan(
    paths: list[Path] | None = typer.Argument(
        None,
        metavar="PATH",
        help="Files or directories to scan (default: the files staged for commit).",
    ),
    all_files: bool = typer.Option(
        False, "--all", help="Scan every tracked file, not only the staged ones."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Find what must not be published: credentials, local paths, transcripts and logs,
    private links, turnkeeper's runtime state.

    Scans the files staged for commit (as the pre-commit hook of `init --hooks` does),
    every tracked file with --all, or the PATHs given. Findings listed in
    .turnkeeper-allow.toml with a reason are allowed; any other fails the scan
    (exit 6, FAILED_PRECONDITION). Secrets are shown by their first 4 characters only.

    Example: turnkeeper scan --all
    """
    from turnkeeper.boundary import repository_root, scan_index, scan_paths

    here = Path.cwd()
    if paths and all_files:
        raise InvalidArgument(
            "--all scans every tracked file: give PATHs or --all, not both",
            reason="conflicting_arguments",
        )
    with _progress() as progress:
        if paths:
            try:
                root = repository_root(here)
            except FailedPrecondition:
                root = here  # files outside any repository are named from here
            report = scan_paths(root, paths, progress=progress)
        else:
            report = scan_index(repository_root(here), staged_only=not all_files, progress=progress)
    failure = None
    if report.findings:
        files = len({f.path for f in report.findings})
        failure = FailedPrecondition(
            f"{len(report.findings)} finding(s) in {files} file(s) must not be published: "
            "remove them, or allow each in .turnkeeper-allow.toml with a reason",
            reason="scan_findings",
            details={"findings": len(report.findings), "files": files},
        )
    if as_json:
        body = report.model_dump(mode="json")
        if failure is not None:
            body["error"] = failure.to_dict()
        print_json(body)
        if failure is not None:
            raise typer.Exit(failure.exit_code)
        return
    _print_text(report)
    if failure is not None:
        raise failure
