"""What a user typed, checked before anything is written.

Arguments that are not UTF-8, ``@FILE`` and ``-`` (stdin) values, and the ranges of
the numeric options. Each refusal is ``INVALID_ARGUMENT`` with a stable reason and the
argument named in its details, never a traceback; text limits themselves (length,
characters) are the kernel's (``turnkeeper/kernel/limits.py``).
"""

from __future__ import annotations

import math
import stat
import sys
from collections.abc import Mapping
from pathlib import Path

from turnkeeper.errors import InvalidArgument

# The refusal reasons are the kernel's (``turnkeeper.kernel.limits``); each is imported
# where a refusal is raised, so that parsing a command line never imports the kernel.

# The most an ``@FILE`` or ``-`` argument may hold: far more than any configuration or
# proposal, and little enough that reading one never strains memory.
MAX_ARGUMENT_BYTES = 1 << 20

DAY_SECONDS = 24 * 3600
CLAIM_LEASE_MAX_SECONDS = 30 * DAY_SECONDS
SESSION_LEASE_MAX_SECONDS = DAY_SECONDS
HOST_TIMEOUT_MAX_SECONDS = 7 * DAY_SECONDS
COMMAND_TIMEOUT_MAX_SECONDS = 7 * DAY_SECONDS
MAX_TURNS_MAX = 1_000_000


def _undecodable(value: object) -> bool:
    """True for text holding a lone surrogate: bytes that were not UTF-8 (Python decodes
    argv with ``surrogateescape``), which can neither be stored nor printed."""
    if isinstance(value, list | tuple):
        return any(_undecodable(item) for item in value)
    if isinstance(value, str | Path):
        text = str(value)
        return any("\ud800" <= ch <= "\udfff" for ch in text)
    return False


def refuse_undecodable(arguments: Mapping[str, object]) -> None:
    """``INVALID_ARGUMENT`` (``not_utf8``) naming the first argument that is not UTF-8.
    (The words after ``--`` of ``evidence record`` are the command's: its proposal's
    ``command`` field refuses them, before the command runs.)"""
    for name, value in arguments.items():
        if _undecodable(value):
            from turnkeeper.kernel.limits import NOT_UTF8

            raise InvalidArgument(
                f"{name} is not valid UTF-8 text", reason=NOT_UTF8, details={"field": name}
            )


def _refuse_file(option: str, path: Path, reason: str, why: str) -> InvalidArgument:
    return InvalidArgument(
        f"{option}: {path} {why}", reason=reason, details={"option": option, "path": str(path)}
    )


def _decoded(option: str, data: bytes, source: str) -> str:
    if len(data) > MAX_ARGUMENT_BYTES:
        raise InvalidArgument(
            f"{option}: {source} is larger than {MAX_ARGUMENT_BYTES} bytes",
            reason="file_too_large",
            details={"option": option, "max_bytes": MAX_ARGUMENT_BYTES},
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        from turnkeeper.kernel.limits import NOT_UTF8

        raise InvalidArgument(
            f"{option}: {source} is not UTF-8 text (byte {exc.start})",
            reason=NOT_UTF8,
            details={"option": option},
        ) from None


def _read_file(option: str, path: Path) -> str:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise _refuse_file(option, path, "missing_file", "does not exist") from None
    except OSError as exc:
        raise _refuse_file(option, path, "unreadable_file", f"cannot be read: {exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise _refuse_file(option, path, "not_a_file", "is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise _refuse_file(option, path, "not_a_file", "is not a regular file")
    if info.st_size > MAX_ARGUMENT_BYTES:
        raise _refuse_file(
            option, path, "file_too_large", f"is larger than {MAX_ARGUMENT_BYTES} bytes"
        )
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_ARGUMENT_BYTES + 1)  # it may have grown since stat
    except OSError as exc:
        raise _refuse_file(option, path, "unreadable_file", f"cannot be read: {exc}") from None
    return _decoded(option, data, str(path))


def read_argument(option: str, text: str) -> str:
    """An option's text: ``@FILE`` is the file's content, ``-`` is stdin, else ``text``."""
    if text == "-":
        return _decoded(option, sys.stdin.buffer.read(MAX_ARGUMENT_BYTES + 1), "stdin")
    if text.startswith("@"):
        return _read_file(option, Path(text[1:]))
    return text


def _out_of_range(option: str, value: float, allowed: str) -> InvalidArgument:
    from turnkeeper.kernel.limits import OUT_OF_RANGE

    shown: float | str = value if math.isfinite(value) else str(value)
    return InvalidArgument(
        f"{option} must be {allowed}, not {value}",
        reason=OUT_OF_RANGE,
        details={"option": option, "value": shown, "allowed": allowed},
    )


def check_seconds(option: str, value: float, maximum: int) -> None:
    """A duration option: a finite number of seconds, above zero, at most ``maximum``."""
    if not math.isfinite(value) or not 0 < value <= maximum:
        raise _out_of_range(option, value, f"more than 0 and at most {maximum} seconds")


def check_count(option: str, value: int, minimum: int, maximum: int) -> None:
    if not minimum <= value <= maximum:
        raise _out_of_range(option, value, f"from {minimum} to {maximum}")


def check_run_options(*, lease: float, host_timeout: int, max_turns: int) -> None:
    """``run``'s numeric options (``--max-turns 0`` means no limit)."""
    check_seconds("--lease", lease, SESSION_LEASE_MAX_SECONDS)
    check_seconds("--host-timeout", host_timeout, HOST_TIMEOUT_MAX_SECONDS)
    check_count("--max-turns", max_turns, 0, MAX_TURNS_MAX)
