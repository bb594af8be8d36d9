"""Every repository path the prose cites exists.

The docs (docs/*.md, README.md) and the comments and docstrings under turnkeeper/
(and under turnkeeper_chaos/, the chaos harness beside it) point readers at files:
``turnkeeper/crashpoints.py``, ``runtime/turn/driver.py``, ``store/_reads.py``,
``docs/design.md``, ``tests/usage/test_upgrade.py``. A cited path is resolved against
the repository root, then against turnkeeper/; one that resolves nowhere fails here,
naming where it is cited. A path counts as a citation when it starts at the
repository's top (``turnkeeper/``, ``turnkeeper_chaos/``, ``tests/``, ``docs/``) or at
one of turnkeeper's packages. Examples are not citations: what a fenced block of a
document or a literal block (``::``) of a docstring shows is somebody's project.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator

from tests.architecture.product import HARNESS, PACKAGE, REPO, product_modules

ROOTS = sorted(
    {"turnkeeper", HARNESS.name, "tests", "docs"}
    | {p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("_")}
)
CITATION = re.compile(
    r"(?<![\w./~$-])((?:" + "|".join(ROOTS) + r")/(?:[\w-]+/)*[\w-]+\.(?:py|md|toml|json|html))\b"
)


def markdown_prose(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of ``text`` outside its fenced code blocks."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            yield n, line


def docstring_prose(text: str) -> Iterator[tuple[int, str]]:
    """(offset, line) of a docstring outside its literal blocks: the lines after one
    that ends in ``::``, indented deeper than it (or blank)."""
    block: int | None = None
    for n, line in enumerate(text.splitlines()):
        indent = len(line) - len(line.lstrip())
        if block is not None and (not line.strip() or indent > block):
            continue
        block = None
        yield n, line
        if line.rstrip().endswith("::"):
            block = indent


def python_prose(source: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every comment and docstring in ``source``."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        docstring = ast.get_docstring(node, clean=False)
        if docstring is not None:
            start = node.body[0].lineno
            yield from ((start + n, line) for n, line in docstring_prose(docstring))


def citations(lines: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    for n, line in lines:
        for match in CITATION.finditer(line):
            yield n, match.group(1)


def exists(cited: str) -> bool:
    return (REPO / cited).exists() or (PACKAGE / cited).exists()


def all_citations() -> list[tuple[str, int, str]]:
    found: list[tuple[str, int, str]] = []
    for doc in sorted([*REPO.glob("docs/*.md"), REPO / "README.md"]):
        where = doc.relative_to(REPO).as_posix()
        lines = markdown_prose(doc.read_text(encoding="utf-8"))
        found += [(where, n, cited) for n, cited in citations(lines)]
    for module in product_modules():
        where = module.relative_to(REPO).as_posix()
        lines = python_prose(module.read_text(encoding="utf-8"))
        found += [(where, n, cited) for n, cited in citations(lines)]
    return found


def test_every_cited_path_exists() -> None:
    found = all_citations()
    dangling = [f"{where}:{n}: {cited}" for where, n, cited in found if not exists(cited)]
    assert dangling == [], "cited paths that do not exist:\n" + "\n".join(dangling)
    # The prose cites files all over: a scan that finds few has stopped reading it.
    assert len(found) > 100


def test_a_citation_is_found_in_prose_and_an_example_is_not() -> None:
    doc = "See `runtime/turn/steps.py`.\n```sh\npytest tests/test_parser.py\n```\n"
    assert [c for _, c in citations(markdown_prose(doc))] == ["runtime/turn/steps.py"]
    source = '"""Config::\n\n    {"path": "docs/a.md"}\n\nSee docs/design.md."""\n# store/_x.py\n'
    cited = sorted(c for _, c in citations(python_prose(source)))
    assert cited == ["docs/design.md", "store/_x.py"]
    assert not exists("runtime/turn/host_start.py") and exists("runtime/turn/host_journal.py")
