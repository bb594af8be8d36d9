"""No ``Any`` in the product: every value has the type of what it is.

A JSON payload is typed with :mod:`turnkeeper.json_types` (``JsonValue`` where it was
just decoded and nothing has looked at it yet, narrowed with ``isinstance`` or
validated into a model where a field is read), a row with its columns, a host's result
with its model, a value that is only passed on or printed as ``object``. The count was
359 before the hosts, the store and the runner were typed, 169 after, and is 0 now;
the budget stays at 0, so a new ``Any`` fails the suite with the line that uses it.
Tests and benchmarks may still use ``Any`` for fixtures; the product — turnkeeper and
the chaos harness beside it, turnkeeper_chaos — may not.
"""

from __future__ import annotations

import ast

from tests.architecture.product import REPO, product_modules

ANY_BUDGET = 0


def any_uses(source: str) -> list[int]:
    """The lines of ``source`` that use the name ``Any`` (``typing.Any`` included), not
    counting the import that brings it in."""
    lines: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name == "Any":
                lines.append(node.lineno)
    return lines


def test_any_uses_stay_under_the_budget() -> None:
    uses = [
        f"{path.relative_to(REPO)}:{line}"
        for path in product_modules()
        for line in any_uses(path.read_text())
    ]
    assert len(uses) <= ANY_BUDGET, f"{len(uses)} uses of Any (budget {ANY_BUDGET}):\n" + "\n".join(
        uses
    )


def test_the_count_sees_every_spelling() -> None:
    source = (
        "from typing import Any\n"
        "import typing\n"
        "def f(x: Any) -> dict[str, Any]: ...\n"
        "y: typing.Any = 1\n"
    )
    assert sorted(any_uses(source)) == [3, 3, 4]
