"""One flipped bit anywhere in a real database: the right answer or ``DATA_LOSS``, never more.

A few hundred single-bit flips (fixed seeds, each on a fresh copy of the same
pristine file; tests/usage/bitflips.py) and, after each, every command a user
reads the project with plus a ``todo claim``: each answers exactly what it answered
on the pristine file or exits ``DATA_LOSS`` (10). Never exit 1, never a different
answer, and never damage SQLite's own integrity check sees while ``verify`` passes.
A handful of flips go through the installed ``turnkeeper`` executable: a todo's kind
in the entity index (it used to make ``todo claim`` say ``NOT_FOUND``), a table's
copy of an indexed column (invisible to reads), the schema, the file header.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.usage import bitflips
from tests.usage.bitflips import DATA_LOSS, OPEN_TODO, Answer, Scratch
from tests.usage.project import UserProject

SEEDS = (20261201, 7)
FLIPS_PER_SEED = 150


@dataclass
class Pristine:
    project: UserProject
    session_id: str
    image: bytes
    answers: dict[str, Answer]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pristine]:
    root = tmp_path_factory.mktemp("bitflips")
    project = UserProject(root / "work")
    try:
        sid = bitflips.build_project(project)
        image = bitflips.pristine_image(project.database)
        scratch = Scratch(root / "baseline")
        scratch.install(image)
        answers = bitflips.answers(scratch, sid)
        assert all(a.exit_code == 0 and a.crashed is None for a in answers.values()), answers
        yield Pristine(project, sid, image, answers)
    finally:
        project.close()


def test_every_flip_is_answered_as_before_or_as_data_loss(
    pristine: Pristine, tmp_path: Path
) -> None:
    scratch = Scratch(tmp_path / "scratch")
    wrong: list[str] = []
    detected = integrity_seen = 0
    for seed in SEEDS:
        for bit in bitflips.live_bits(pristine.image, seed, FLIPS_PER_SEED):
            image = bitflips.flipped(pristine.image, bit)
            scratch.install(image)
            got = bitflips.answers(scratch, pristine.session_id)
            where = f"seed {seed} byte {bit // 8} bit {bit % 8}"
            for name, answer in got.items():
                before = pristine.answers[name]
                if answer.exit_code == DATA_LOSS:
                    continue
                if answer.crashed or (answer.exit_code, answer.body) != (
                    before.exit_code,
                    before.body,
                ):
                    wrong.append(f"{where}: {name} exited {answer.exit_code} {answer.crashed}")
            detected += any(a.exit_code == DATA_LOSS for a in got.values())
            if bitflips.integrity_problems(image, tmp_path / "check"):
                integrity_seen += 1
                if got["verify"].exit_code != DATA_LOSS:
                    wrong.append(f"{where}: damage SQLite sees, verify exited 0")
    assert wrong == []
    # The flips did reach what the commands read, and damage only SQLite's check sees.
    total = len(SEEDS) * FLIPS_PER_SEED
    assert detected >= total // 5, (detected, total)
    assert integrity_seen >= 3, integrity_seen


def _flip_at(image: bytes, marker: bytes, offset: int, mask: int) -> bytes:
    at = image.find(marker)
    assert at >= 0 and image.find(marker, at + 1) < 0, f"{marker!r} must occur once"
    data = bytearray(image)
    data[at + offset] ^= mask
    return bytes(data)


class _Elsewhere(UserProject):
    """The user's project, its commands run against another ``.turnkeeper/``."""

    def __init__(self, base: UserProject, state_root: Path) -> None:
        # Not UserProject.__init__: the repository is the user's own, made already.
        self.root = base.root
        self._background = []
        self._runs = 0
        self._state_root = state_root

    def env(self, **extra: str) -> dict[str, str]:
        return super().env(TURNKEEPER_DIR=str(self._state_root), **extra)


def _installed(pristine: Pristine, tmp_path: Path, image: bytes) -> UserProject:
    """The user's project with ``image`` as its database (a copy; the original stays)."""
    scratch = Scratch(tmp_path)
    scratch.install(image)
    return _Elsewhere(pristine.project, scratch.writes)


def test_a_todo_kind_flipped_in_the_entity_index_is_data_loss_not_not_found(
    pristine: Pristine, tmp_path: Path
) -> None:
    # The row (entity_id, stream_id, entity_kind, ...): 'todo' -> 'todk', one bit.
    marker = f"{OPEN_TODO}goal:{bitflips.GOAL}todo".encode()
    image = _flip_at(pristine.image, marker, len(marker) - 1, 0x04)
    project = _installed(pristine, tmp_path, image)
    claim = project.tk("todo", "claim", OPEN_TODO, "--json", expect=DATA_LOSS)
    assert claim.json()["error"]["details"]["entity_id"] == OPEN_TODO
    verified = project.tk("verify", "--json", expect=DATA_LOSS).json()
    assert {m["kind"] for m in verified["mismatches"]} == {"index"}


def test_a_flip_in_a_tables_copy_of_an_indexed_column_fails_verify(
    pristine: Pristine, tmp_path: Path
) -> None:
    # An event row of the table (not its index entry): reads go through the index
    # and see nothing wrong; SQLite's integrity check does.
    marker = f"goal:{bitflips.GOAL}\x02todo_added".encode()
    image = _flip_at(pristine.image, marker, len("goal:g"), 0x02)
    project = _installed(pristine, tmp_path, image)
    verified = project.tk("verify", "--json", expect=DATA_LOSS).json()
    details = " ".join(m["detail"] for m in verified["mismatches"])
    assert "integrity check" in details and "sqlite_autoindex_events_1" in details
    shown = project.tk("goal", "show", bitflips.GOAL, "--json", expect=None)
    assert shown.returncode in (0, DATA_LOSS)


@pytest.mark.parametrize(
    ("what", "marker", "offset", "mask"),
    [
        ("a table name in the schema", b"tableprojectionsprojections", 7, 0x80),
        ("a column name in the schema", b"entity_kind VARCHAR(100) NOT NULL", 3, 0x01),
        ("the file format write version", b"SQLite format 3\x00", 18, 0x01),
    ],
)
def test_a_damaged_schema_or_header_is_data_loss_for_every_command(
    pristine: Pristine, tmp_path: Path, what: str, marker: bytes, offset: int, mask: int
) -> None:
    image = _flip_at(pristine.image, marker, offset, mask)
    project = _installed(pristine, tmp_path, image)
    for args in (("status",), ("goal", "show", bitflips.GOAL), ("verify",)):
        done = project.tk(*args, "--json", expect=DATA_LOSS)
        assert done.json()["error"]["code"] == "DATA_LOSS", (what, args)
        assert "Traceback" not in done.stderr
