"""``safe`` and ``visible``: text from users, agents and the database, for a terminal."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from turnkeeper.cli.output import safe, visible


def printed(markup: str) -> str:
    """What Rich writes for ``markup`` (no colours, so only the characters are compared)."""
    console = Console(width=10_000, color_system=None, emoji=False)
    with console.capture() as capture:
        console.print(markup, end="")
    return capture.get()


def test_control_characters_are_shown_not_sent() -> None:
    assert visible("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m"
    assert visible("bell\x07 del\x7f c1\x9b") == "bell\\x07 del\\x7f c1\\x9b"
    assert visible("caf\udce9") == "caf\\udce9"  # undecodable bytes print, not crash
    assert visible("abc\u202edef") == "abc\\u202edef"  # a bidi override reorders a line
    assert visible("one\ntwo\tthree") == "one\\ntwo\\tthree"
    assert visible("one\ntwo\tthree", lines=True) == "one\ntwo\tthree"


def test_markup_in_user_text_prints_literally() -> None:
    for text in (
        *("[bold]x[/]", "[red]", "\\[bold]", "trailing\\", "[link=https://e.x]y[/link]"),
        # A backslash before a "[" that starts no tag, and trailing runs of them.
        *("\\[", "a\\[b", "\\\\[x", "two\\\\", "[\\"),
    ):
        # As the renderers use it: inside markup of their own.
        assert printed(f"[dim]{safe(text)}[/] after") == f"{text} after"


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=60))
def test_what_safe_prints_holds_no_control_character(text: str) -> None:
    out = printed(f"[bold]{safe(text)}[/]")
    assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in out), repr(out)
    assert out == visible(text)
