"""A table of many rows, printed exactly as Rich's ``Table`` prints it, in a fraction of the time.

Rich measures and renders every cell through its whole renderable pipeline: ~70 µs a
cell, 0.6 s for a thousand sessions of eight columns, longer than everything else
``status`` does. :class:`FastTable` keeps Rich's layout and does less work for it:

* column widths: a column's width depends only on the largest minimum and the largest
  maximum measurement among its cells, and each is monotone in the cell text's longest
  word and longest line. So Rich's own width calculation runs on a stand-in table
  holding, per column, the cell with the longest word and the cell with the longest
  line: the widths come out the same;
* cells: a plain cell (no style; printable text with no leading or trailing space) that
  fits its left-justified column is one line, ``" " + text + padding + " "``, exactly
  what Rich draws for it (unstyled text prints as its characters however it is cut
  into segments).
  Every other cell (styled, wrapped, a header) is rendered by Rich itself, once per
  distinct text and column;
* the title, the borders and the assembly of rows follow Rich's ``Table`` for this
  table's settings: heavy-head box with edges, a header, no footer, no row lines.

``tests/cli/test_fast_table.py`` compares the output with ``Table``'s, character for
character and style for style, on generated tables at many widths.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rich.box import ASCII2
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.table import Column, Table
from rich.text import Text

Lines = list[list[Segment]]


def _extent(text: Text) -> tuple[int, int]:
    """(longest word, longest line) in cells: all that Rich's measurement of ``text`` reads."""
    plain = text.plain
    longest_line = max((cell_len(line) for line in plain.splitlines()), default=0)
    return max((cell_len(word) for word in plain.split()), default=longest_line), longest_line


def _merged(line: list[Segment]) -> list[Segment]:
    """``line`` with each run of unstyled segments joined into one. An unstyled segment
    prints as its text alone, so the output is the same; the console has fewer
    segments to crop and write."""
    out: list[Segment] = []
    run: list[str] = []
    for segment in line:
        if segment.style or segment.control:
            if run:
                out.append(Segment("".join(run)))
                run = []
            out.append(segment)
        else:
            run.append(segment.text)
    if run:
        out.append(Segment("".join(run)))
    return out


class FastTable:
    """``Table(*headers, title=title)`` whose rows are strings (Rich markup). A header
    is a column's title, or a ``Column`` for a column of its own settings (``overflow``,
    ``justify``, ...)."""

    def __init__(self, *headers: str | Column, title: str | None = None) -> None:
        if not headers:
            raise ValueError("a table needs at least one column")
        self._headers = headers
        self._title = title
        self._rows: list[tuple[str, ...]] = []

    @property
    def column_count(self) -> int:
        return len(self._headers)

    def add_row(self, *cells: str) -> None:
        if len(cells) != len(self._headers):
            raise ValueError(f"a row needs {len(self._headers)} cells, not {len(cells)}")
        self._rows.append(cells)

    def rich_table(self, rows: Iterable[Sequence[str]] | None = None) -> Table:
        """This table as Rich's ``Table``, holding ``rows`` (default: all of them)."""
        # A copy of each Column: Rich's Table keeps its rows' cells in its columns.
        headers = (h if isinstance(h, str) else h.copy() for h in self._headers)
        table = Table(*headers, title=self._title)
        for row in self._rows if rows is None else rows:
            table.add_row(*row)
        return table

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(
            console, options, _Drawing(console, options, self._rows).stand_in(self)
        )

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if not self._rows:
            yield self.rich_table()  # a header alone: nothing to save
            return
        drawing = _Drawing(console, options, self._rows)
        stand_in = drawing.stand_in(self)
        drawing.widths = _column_widths(console, options, stand_in)
        # The same arithmetic as Table.__rich_console__: its edges and dividers.
        extra_width = self.column_count + 1
        drawing.options = options.update(
            width=sum(drawing.widths) + extra_width, highlight=stand_in.highlight, height=None
        )
        if self._title:
            title_style = Style.pick_first(stand_in.title_style, "table.title")
            title = console.render_str(self._title, style=title_style, highlight=False)
            yield from console.render(title, drawing.options.update(justify=stand_in.title_justify))
        yield from drawing.body(stand_in)


def _column_widths(console: Console, options: ConsoleOptions, table: Table) -> list[int]:
    """The widths Rich's ``Table`` gives ``table``'s columns, read off the top border it
    draws. Drawn untitled with the ``ASCII2`` box, that border is ``+---+--+``: each run
    of ``-`` is a column's width. A box's characters take no part in the widths, and the
    border is the first line drawn, so no row is drawn to find them."""
    bordered = copy.copy(table)
    bordered.box, bordered.title = ASCII2, None
    top: list[str] = []
    for segment in console.render(bordered, options):
        if segment.text == "\n":
            break
        top.append(segment.text)
    return [len(run) for run in "".join(top)[1:-1].split("+")]


@dataclass
class _Drawing:
    """One rendering of a :class:`FastTable`: its console, options, widths and caches."""

    console: Console
    options: ConsoleOptions
    rows: list[tuple[str, ...]]
    widths: list[int] = field(default_factory=list)
    _texts: dict[str, Text] = field(default_factory=dict)
    _lines: dict[tuple[str, int, bool], Lines] = field(default_factory=dict)

    def text(self, cell: str) -> Text:
        """The cell as Rich reads a string cell: markup, no highlighting."""
        text = self._texts.get(cell)
        if text is None:
            text = self.console.render_str(cell, markup=self.options.markup, highlight=False)
            self._texts[cell] = text
        return text

    def stand_in(self, table: FastTable) -> Table:
        """The table with two rows whose column measurements equal the whole table's:
        per column, the cell with the longest word and the cell with the longest line."""
        columns = table.column_count
        longest_word: list[tuple[str, int]] = [("", -1)] * columns
        longest_line: list[tuple[str, int]] = [("", -1)] * columns
        seen: list[set[str]] = [set() for _ in range(columns)]
        for row in self.rows:
            for i, cell in enumerate(row):
                if cell in seen[i]:
                    continue
                seen[i].add(cell)
                word, line = _extent(self.text(cell))
                if word > longest_word[i][1]:
                    longest_word[i] = (cell, word)
                if line > longest_line[i][1]:
                    longest_line[i] = (cell, line)
        rows = [[cell for cell, _ in longest_word], [cell for cell, _ in longest_line]]
        return table.rich_table(rows=rows if self.rows else ())

    def _style(self, table: Table, column: Column, header: bool) -> Style:
        get_style = self.console.get_style
        if header:
            return get_style(table.header_style or "") + get_style(column.header_style)
        return get_style(column.style or "") + Style.null()  # no row styles

    def cell(self, table: Table, index: int, cell: str, header: bool) -> Lines:
        width = self.widths[index]
        key = (cell, index, header)  # by column: columns differ in width and settings
        lines = self._lines.get(key)
        if lines is not None:
            return lines
        column = table.columns[index]
        style = self._style(table, column, header)
        top, right, bottom, left = Padding.unpack(table.padding)
        text = self.text(cell)
        plain = text.plain
        room = width - left - right
        if (
            not header
            and column.justify == "left"  # the line below is left-justified
            and not style
            and not text.spans
            and not text.style
            and plain
            and plain.isprintable()
            and plain == plain.strip()
            and cell_len(plain) <= room
        ):
            lines = [[Segment(" " * left + plain + " " * (room - cell_len(plain) + right))]]
        else:
            lines = self.console.render_lines(
                Padding(cell, (top, right, bottom, left)),
                self.options.update(
                    width=width,
                    justify=column.justify,
                    no_wrap=column.no_wrap,
                    overflow=column.overflow,
                    height=None,
                    highlight=column.highlight,
                ),
                style=style,
            )
        self._lines[key] = lines
        return lines

    def _shaped(self, table: Table, cells: list[Lines], header: bool) -> list[Lines]:
        """Every cell of a row as tall as the tallest, padded with blank lines above or
        below as its column aligns (Segment.align_top/_middle/_bottom, which Table uses).
        Each line of a cell is already its column's width, so nothing else changes."""
        row_height = max(len(lines) for lines in cells)
        if row_height == 0:  # nothing drawn at all: Rich's own shaping of a blank row
            return [Segment.set_shape(lines, self.widths[i], 1) for i, lines in enumerate(cells)]
        if all(len(lines) == row_height for lines in cells):
            return cells
        shaped = []
        for i, lines in enumerate(cells):
            extra = row_height - len(lines)
            if not extra:
                shaped.append(lines)
                continue
            column = table.columns[i]
            blank = [Segment(" " * self.widths[i], self._style(table, column, header))]
            vertical = "bottom" if header else column.vertical
            above = extra if vertical == "bottom" else extra // 2 if vertical == "middle" else 0
            shaped.append([blank] * above + lines + [blank] * (extra - above))
        return shaped

    def body(self, table: Table) -> RenderResult:
        console, widths = self.console, self.widths
        border = console.get_style(table.style or "") + console.get_style(table.border_style or "")
        assert table.box is not None  # Table's default box
        safe = console.safe_box if table.safe_box is None else table.safe_box
        box = table.box.substitute(self.options, safe=safe)
        edges = [
            (
                Segment(box.head_left, border),
                Segment(box.head_right, border),
                Segment(box.head_vertical, border),
            ),
            (
                Segment(box.mid_left, border),
                Segment(box.mid_right, border),
                Segment(box.mid_vertical, border),
            ),
            (
                Segment(box.foot_left, border),
                Segment(box.foot_right, border),
                Segment(box.foot_vertical, border),
            ),
        ]
        new_line = Segment.line()
        yield Segment(box.get_top(widths), border)
        yield new_line
        headers = tuple(str(column.header) for column in table.columns)
        rows = [(True, headers), *((False, row) for row in self.rows)]
        for index, (header, row) in enumerate(rows):
            cells = self._shaped(
                table, [self.cell(table, i, cell, header) for i, cell in enumerate(row)], header
            )
            left, right, divider = edges[0 if index == 0 else (2 if index == len(rows) - 1 else 1)]
            if not divider.text.strip():  # a blank divider takes the row's background
                divider = Segment(divider.text, Style.null().background_style + divider.style)
            for line_no in range(len(cells[0])):
                line = [left]
                for i, lines in enumerate(cells):
                    if i:
                        line.append(divider)
                    line.extend(lines[line_no])
                line += (right, new_line)
                yield from _merged(line)
            if header:
                yield Segment(box.get_row(widths, "head", edge=True), border)
                yield new_line
        yield Segment(box.get_bottom(widths), border)
        yield new_line
