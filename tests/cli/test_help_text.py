"""A command's --help prints each paragraph of its docstring as one flowing text."""

from __future__ import annotations

import os
import subprocess

from tests.usage.project import turnkeeper_executable
from turnkeeper.cli.help_text import reflow

TIMEOUT = 120.0


def test_a_paragraph_over_several_lines_becomes_one() -> None:
    text = """First line.

    A sentence that runs
    over two lines.

    \b
        turnkeeper run
        turnkeeper status

    - a list item
    - another
    """
    assert reflow(text).split("\n\n") == [
        "First line.",
        "A sentence that runs over two lines.",
        "\b\n    turnkeeper run\n    turnkeeper status",  # an example: kept as written
        "- a list item\n- another",  # a list: kept as written
    ]


def test_serve_help_is_not_broken_mid_sentence() -> None:
    env = {**os.environ, "COLUMNS": "200"}
    shown = subprocess.run(
        [*turnkeeper_executable(), "serve", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
        check=True,
    ).stdout
    # The docstring breaks this sentence after "read"; on a wide terminal it is one line.
    assert "the admin token printed at start (or read from --token-file), or a share" in shown
    assert "turnkeeper serve --port 8765" in shown  # the example still on a line of its own
