"""The turn's tables in docs/design.md, rendered from runtime/turn/steps.py.

The document holds each table between a pair of HTML comment markers; rendering puts
the declaration's current tables there and leaves the rest of the text as it is.
``python -m turnkeeper.runtime.turn.steps_doc docs/design.md`` rewrites the file;
``tests/runtime/test_turn_steps.py`` fails while the file holds anything else.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from turnkeeper.kernel.session import TurnPhase
from turnkeeper.runtime.turn.steps import RECOVERY_STEPS, RECOVERY_TABLE, TURN_STEPS


def _code(items: Sequence[str]) -> str:
    return ", ".join(f"`{item}`" for item in items) if items else "—"


def _phase(phase: TurnPhase | None) -> str:
    return f"`{phase.value}`" if phase is not None else "none in flight"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def steps_table() -> str:
    """Every step of the turn, then recovery's own, as a markdown table."""
    rows = [
        [
            str(n),
            f"`{step.name}`",
            step.writes,
            _code(step.commits),
            "yes" if step.durable else "no",
            f"`{step.crash_point}`",
            _phase(step.leaves),
            _code(step.recovery),
        ]
        for n, step in enumerate(TURN_STEPS, 1)
    ]
    rows += [
        ["", f"recovery `{step.name}`", step.writes, "—", "—", f"`{step.crash_point}`", "", ""]
        for step in RECOVERY_STEPS
    ]
    header = ("#", "step", "writes", "commit", "fsync'd", "crash point", "leaves", "recovery")
    return _table(header, rows)


def recovery_table() -> str:
    """The recovery table as a markdown table."""
    rows = [
        [
            f"`{row.name}`",
            row.last_durable,
            ", ".join(_phase(p) for p in row.phases),
            row.on_restart,
            _code(row.actions),
        ]
        for row in RECOVERY_TABLE
    ]
    header = ("row", "last durable step", "phase", "on restart", "recovery report")
    return _table(header, rows)


TABLES = {"turn-steps": steps_table, "recovery-table": recovery_table}


def markers(name: str) -> tuple[str, str]:
    """The comments that open and close table ``name`` in the document."""
    note = "generated from turnkeeper/runtime/turn/steps.py"
    return f"<!-- {name}: {note} -->", f"<!-- /{name} -->"


def rendered(text: str) -> str:
    """``text`` with every table between its markers rendered again; a missing or
    repeated marker is an error, not a table silently left out."""
    for name, render in TABLES.items():
        begin, end = markers(name)
        if text.count(begin) != 1 or text.count(end) != 1:
            raise ValueError(f"the document needs one {begin!r} and one {end!r}")
        head, rest = text.split(begin)
        _, tail = rest.split(end)
        text = f"{head}{begin}\n{render()}\n{end}{tail}"
    return text


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m turnkeeper.runtime.turn.steps_doc DOCUMENT\n")
        return 2
    path = Path(argv[0])
    text = path.read_text(encoding="utf-8")
    new = rendered(text)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
