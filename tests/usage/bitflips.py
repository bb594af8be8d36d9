"""Single-bit flips in a real turnkeeper database, and what each command answers after one.

A project made as a user makes one (tests/usage/project.py): a goal, three todos, a
session whose agent completed two of them through the real ``turnkeeper run``. Its
database, checkpointed into one file, is the pristine image. A flip is one bit of
that image on a fresh copy; after it every command of :data:`COMMANDS` runs (in this
process through Typer's runner, for speed: the exit code is the one the installed
command would exit with, an escaped exception included, which the real command
would exit 1 with) and must answer what it answered on the pristine image, or exit
``DATA_LOSS``. ``todo claim`` writes, so it runs on a copy of its own.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from tests.usage.project import UserProject
from turnkeeper.cli.main import app

GOAL, OPEN_TODO = "g1", "t-open"
DATA_LOSS = 10
# Fields that say when a command ran, not what it found.
_CLOCK_FIELDS = frozenset({"at", "lease_expires_at", "now", "checked_at", "evaluated_at"})


def build_project(project: UserProject, turns: int = 2) -> str:
    """``turns`` completed turns (each completing a todo) and one open todo; returns the
    session id."""
    project.tk("goal", "add", "Ship the parser", "--id", GOAL)
    for todo in [f"t-{n}" for n in range(turns)] + [OPEN_TODO]:
        project.tk("todo", "add", GOAL, f"Work on {todo}", "--id", todo)
    agent = project.agent(
        "worker",
        "#!/bin/sh\n"
        'echo "work of $TURNKEEPER_TURN_ID" >> notes.txt\n'
        'echo \'{"kind":"result","data":{"todo_done":true}}\'\n',
    )
    config = project.host_config("worker", {"command": [str(agent)], "event_format": "jsonl"})
    created = project.tk_json(
        "session", "create", GOAL, "--host", "subprocess", "--host-config", config
    )
    project.tk("run", "--max-turns", str(turns))
    return str(created["session_id"])


def pristine_image(database: Path) -> bytes:
    """The database as one file: every WAL frame checkpointed into it."""
    conn = sqlite3.connect(database)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    return database.read_bytes()


@dataclass(frozen=True)
class Answer:
    exit_code: int
    body: Any  # the JSON printed, clock fields removed; None when not JSON
    crashed: str | None  # an exception that escaped the command


def _without_clock(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_clock(v) for k, v in value.items() if k not in _CLOCK_FIELDS}
    if isinstance(value, list):
        return [_without_clock(v) for v in value]
    return value


class Scratch:
    """Two project directories whose databases are replaced for each flip."""

    def __init__(self, root: Path) -> None:
        self.reads = root / "reads"
        self.writes = root / "writes"
        for project in (self.reads, self.writes):
            (project / ".turnkeeper").mkdir(parents=True, exist_ok=True)
        self.runner = CliRunner()

    def install(self, image: bytes) -> None:
        for project in (self.reads, self.writes):
            database = project / ".turnkeeper" / "turnkeeper.db"
            for suffix in ("-wal", "-shm"):
                Path(f"{database}{suffix}").unlink(missing_ok=True)
            database.write_bytes(image)

    def run(self, project: Path, *args: str) -> Answer:
        with _environment(TURNKEEPER_DIR=str(project), TURNKEEPER_OWNER="flip-tester"):
            result = self.runner.invoke(app, list(args))
        crashed = None
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            crashed = repr(result.exception)
        try:
            body = _without_clock(json.loads(result.stdout))
        except ValueError:
            body = None
        return Answer(result.exit_code, body, crashed)


@contextmanager
def _environment(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def commands(session_id: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """name -> (which scratch project, arguments)."""
    return {
        "status": ("reads", ("status", "--json")),
        "goal show": ("reads", ("goal", "show", GOAL, "--json")),
        "session show": ("reads", ("session", "show", session_id, "--json")),
        "verify": ("reads", ("verify", "--json")),
        "todo claim": ("writes", ("todo", "claim", OPEN_TODO, "--json")),
    }


def answers(scratch: Scratch, session_id: str) -> dict[str, Answer]:
    out = {}
    for name, (where, args) in commands(session_id).items():
        project = scratch.reads if where == "reads" else scratch.writes
        out[name] = scratch.run(project, *args)
    return out


def flipped(image: bytes, bit: int) -> bytes:
    data = bytearray(image)
    data[bit // 8] ^= 1 << (bit % 8)
    return bytes(data)


def integrity_problems(image: bytes, where: Path) -> list[str]:
    """What SQLite's own integrity check says of ``image`` (checked on a copy)."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / "check.db"
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(image)
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        conn.text_factory = lambda raw: raw.decode(errors="replace")  # messages quote rows
        try:
            rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall()]
        finally:
            conn.close()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # a message quoting bad bytes
        return [f"unreadable: {exc}"]
    return [] if rows == ["ok"] else rows


def live_bits(image: bytes, seed: int, count: int) -> list[int]:
    """``count`` bits to flip, drawn with ``seed``: half anywhere in the file, half in
    the bytes SQLite reads (page headers, cell pointers, cell contents), where a flip
    does something."""
    rng = random.Random(seed)
    page_size = int.from_bytes(image[16:18], "big") or 65536
    live: list[tuple[int, int]] = []  # [start, end) byte ranges
    for page in range(len(image) // page_size):
        base = page * page_size
        header = base + (100 if page == 0 else 0)
        kind = image[header]
        if kind not in (2, 5, 10, 13):
            live.append((base, base + page_size))  # overflow, freelist, ...: all of it
            continue
        header_size = 8 if kind in (10, 13) else 12
        cells = int.from_bytes(image[header + 3 : header + 5], "big")
        content = int.from_bytes(image[header + 5 : header + 7], "big") or 65536
        live.append((base, header + header_size + 2 * cells))
        live.append((base + content, base + page_size))
    spans = [(a, b) for a, b in live if b > a]
    weights = [b - a for a, b in spans]
    bits = []
    for i in range(count):
        if i % 2:
            bits.append(rng.randrange(len(image) * 8))
        else:
            start, end = rng.choices(spans, weights)[0]
            bits.append(rng.randrange(start * 8, end * 8))
    return bits


def copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(source, target, dirs_exist_ok=True)
