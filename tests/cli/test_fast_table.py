"""FastTable prints what Rich's Table prints: the same characters, styled the same.

Generated tables (plain words, wide characters, long words that wrap or are cut with
an ellipsis, markup styles, escaped brackets, empty cells, blank and control
characters) at console widths from far too narrow to wide, compared with the very
``Table`` they stand for: byte for byte on a plain console, character and style for
character and style on a colour terminal.
"""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console, JustifyMethod, OverflowMethod, RenderableType
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.table import Column

from turnkeeper.cli.fast_table import FastTable

WORDS = st.sampled_from(
    [
        "a",
        "session",
        "goal-00",
        "0badcafe",
        "closed",
        "(work done)",
        "turn-7000001700000003",
        "界界",
        "e\u0301t\u0301e\u0301",
        "x" * 40,
        "\\[not markup]",
        "[bold]bold[/]",
        "[yellow]ready[/]",
        "[dim]suspended[/] (no_progress)",
        "-",
        "",
        " ",
        "tab\there",
        "two\nlines",
        "\x1b[31m",
    ]
)
CELL = st.lists(WORDS, min_size=1, max_size=4).map(" ".join)


def _plain(renderable: RenderableType, width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, emoji=False, color_system=None).print(renderable)
    return out.getvalue()


def _styled(renderable: RenderableType, width: int) -> list[list[tuple[str, Style]]]:
    """Every printed line as (character, style) pairs: how it looks, however Rich cut it
    into segments."""
    console = Console(
        file=io.StringIO(), width=width, emoji=False, force_terminal=True, color_system="truecolor"
    )
    lines = Segment.split_lines(console.render(renderable, console.options))
    return [
        [(char, segment.style or Style.null()) for segment in line for char in segment.text]
        for line in lines
    ]


def _table(headers: list[str | Column], rows: list[list[str]], title: str | None) -> FastTable:
    table = FastTable(*headers, title=title)
    for row in rows:
        table.add_row(*row)
    return table


@st.composite
def tables(draw: st.DrawFn) -> tuple[FastTable, int]:
    columns = draw(st.integers(min_value=1, max_value=6))
    titles = draw(st.lists(CELL, min_size=columns, max_size=columns))
    # A header is a title, or a Column of its own overflow and justification.
    overflows: list[OverflowMethod] = ["fold", "ellipsis", "crop"]
    justifications: list[JustifyMethod] = ["left", "right"]
    headers: list[str | Column] = [
        Column(
            title,
            overflow=draw(st.sampled_from(overflows)),
            justify=draw(st.sampled_from(justifications)),
        )
        if draw(st.booleans())
        else title
        for title in titles
    ]
    rows = draw(
        st.lists(st.lists(CELL, min_size=columns, max_size=columns), min_size=1, max_size=12)
    )
    title = draw(st.none() | CELL)
    width = draw(st.integers(min_value=4, max_value=160))
    return _table(headers, rows, title), width


@settings(max_examples=300, deadline=None)
@given(tables())
def test_same_characters_as_rich(case: tuple[FastTable, int]) -> None:
    table, width = case
    assert _plain(table, width) == _plain(table.rich_table(), width)


@settings(max_examples=300, deadline=None)
@given(tables())
def test_same_styles_as_rich(case: tuple[FastTable, int]) -> None:
    table, width = case
    assert _styled(table, width) == _styled(table.rich_table(), width)


@settings(max_examples=200, deadline=None)
@given(tables())
def test_measures_as_rich(case: tuple[FastTable, int]) -> None:
    """What a layout holding the table (a panel, a grid) reads of it."""
    table, width = case
    console = Console(file=io.StringIO(), width=width, emoji=False)
    options = console.options
    expected = Measurement.get(console, options, table.rich_table())
    assert Measurement.get(console, options, table) == expected


@pytest.mark.parametrize("width", [20, 60, 80, 100, 200])
def test_a_session_listing_is_drawn_as_rich_draws_it(width: int) -> None:
    """The shape `status` prints: many rows, most cells repeated, one column distinct."""
    headers: list[str | Column] = [
        "session", "goal", "host", Column("status", overflow="fold"), "turns", "lost",
        "failed", Column("in flight", overflow="fold"),
    ]  # fmt: skip
    rows = [
        [
            f"{n:08x}",
            f"goal-{n % 4:02d}",
            "noop",
            "[yellow]ready[/]" if n % 10 else "[dim]closed[/] (work done)",
            str(n % 17),
            "0",
            str(n % 2),
            f"turn-{n:016x}" if n % 7 == 0 else "-",
        ]
        for n in range(300)
    ]
    table = _table(headers, rows, "Sessions")
    assert _plain(table, width) == _plain(table.rich_table(), width)
    assert _styled(table, width) == _styled(table.rich_table(), width)


def test_a_row_must_fill_every_column() -> None:
    table = FastTable("a", "b")
    with pytest.raises(ValueError, match="2 cells"):
        table.add_row("only one")
