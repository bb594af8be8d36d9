"""Typer's renderer imported without ``rich.markdown`` and ``rich.traceback``
(cli/typer_renderer.py): help prints the same bytes, and what does need either module
still gets the real one.

Each check runs in a fresh interpreter: the point is what a process imports first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

TIMEOUT = 120.0

# turnkeeper's top-level help, drawn by the app with Typer's renderer already imported:
# PREPARE is the one line that differs between the two ways of importing it.
DRAW_HELP = """
import sys
{prepare}
from turnkeeper.cli.main import app
try:
    app(["--help"] + sys.argv[1:], prog_name="turnkeeper")
except SystemExit as exit:
    assert exit.code == 0, exit.code
assert ("rich.markdown" in sys.modules) == {markdown_expected}, "which import ran"
"""
WHOLE = "import typer.rich_utils"
DEFERRED = "import turnkeeper.cli.typer_renderer as r; r.import_typer_renderer()"


def _python(code: str, *args: str, columns: int = 80, color: bool = False) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TURNKEEPER_", "NO_COLOR"))}
    env["COLUMNS"] = str(columns)
    if color:
        env["FORCE_COLOR"] = "1"
    else:
        env.pop("FORCE_COLOR", None)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


@pytest.mark.parametrize("columns", [60, 80, 200])
@pytest.mark.parametrize("color", [False, True])
@pytest.mark.parametrize("command", [(), ("session",), ("goal", "add")])
def test_help_prints_what_typers_whole_renderer_prints(
    columns: int, color: bool, command: tuple[str, ...]
) -> None:
    args = [*command, "--help"] if command else []
    whole = _python(
        DRAW_HELP.format(prepare=WHOLE, markdown_expected=True), *args, columns=columns, color=color
    )
    deferred = _python(
        DRAW_HELP.format(prepare=DEFERRED, markdown_expected=False),
        *args,
        columns=columns,
        color=color,
    )
    assert "Usage: " in whole and "turnkeeper" in whole
    assert deferred == whole


def test_markdown_mode_and_tracebacks_still_get_the_real_modules() -> None:
    out = _python(
        """
        import sys
        from turnkeeper.cli.typer_renderer import import_typer_renderer
        rich_utils = import_typer_renderer()
        assert "rich.markdown" not in sys.modules and "rich.traceback" not in sys.modules

        import typer
        from typer.testing import CliRunner

        app = typer.Typer(rich_markup_mode="markdown")

        @app.command()
        def hello() -> None:
            '''Say **hello** to `the world`.'''

        result = CliRunner().invoke(app, ["--help"])
        assert result.exit_code == 0, result.output
        assert "Say hello to the world." in result.output, result.output  # markdown rendered
        import rich.markdown
        assert isinstance(rich_utils.Markdown("x"), rich.markdown.Markdown)

        try:
            raise ValueError("boom")
        except ValueError as error:
            traceback = rich_utils.Traceback.from_exception(type(error), error, None)
        import rich.traceback
        assert isinstance(traceback, rich.traceback.Traceback)
        print("ok")
        """
    )
    assert out == "ok\n"


def test_a_module_imported_before_is_used_as_it_is() -> None:
    out = _python(
        """
        import rich.markdown
        from turnkeeper.cli.typer_renderer import import_typer_renderer
        rich_utils = import_typer_renderer()
        assert rich_utils.Markdown is rich.markdown.Markdown
        assert import_typer_renderer() is rich_utils
        print("ok")
        """
    )
    assert out == "ok\n"
