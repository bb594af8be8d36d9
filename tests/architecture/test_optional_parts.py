"""The core and the optional parts, executable (docs/architecture.md, "The core and the
optional parts").

The core is what every install has and a newcomer learns first: the kernel, the store,
the runtime, the hosts, the CLI and the small packages they stand on. The optional
parts — the server (``server``, ``api``, ``web``), the runner, the boundary, the
handoff, and the chaos harness (``turnkeeper_chaos``, a package beside turnkeeper) —
each have a doc of their own, and the core reaches one only at a declared seam: a
named core module, the optional modules it may import there, and whether it must
import them where they are used (inside a function, or under ``TYPE_CHECKING``) so
that the core starts, and every other command runs, without them. Nothing in
turnkeeper imports ``turnkeeper_chaos`` but the ``turnkeeper chaos`` command, when it
runs.

What each optional part may import of the core (and of the other optional parts) is
test_layers.py's ``MAY_IMPORT``; this file says which packages are which, and holds
the core to its seams. A new package fails here until it is placed on one side.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import pytest

from tests.architecture.product import HARNESS as HARNESS_ROOT
from tests.architecture.product import PACKAGE, REPO
from tests.architecture.test_layers import HARNESS, MAY_IMPORT, package_of

# The core: every install's, and what a newcomer reads first.
CORE = frozenset(
    {
        *("errors", "json_types", "crashpoints", "memo", "supervision", "vocabulary"),
        *("host_reports", "brief", "extras", "kernel", "store", "hosts", "tools", "effects"),
        *("extensions", "notify", "runtime", "project_api", "cli", "__init__"),
        # Adapters for other frameworks' state: their stream folds are core (``verify``
        # folds every stream); a framework's own module needs its extra when used.
        "integrations",
    }
)
# The optional parts, each with its doc (relative to the repository).
OPTIONAL: dict[str, str] = {
    "server": "docs/server.md",
    "api": "docs/api.md",
    "web": "docs/web.md",
    "runner": "docs/runner.md",
    "boundary": "docs/boundary.md",
    "handoff": "docs/handoff.md",
    HARNESS: "docs/chaos.md",
}


@dataclass(frozen=True)
class Seam:
    """Where one core module may import optional modules: ``reaches`` are dotted names
    below turnkeeper (``runner``, ``boundary.config_secrets``) or ``turnkeeper_chaos``;
    ``deferred``, that each import is made where it is used, never at the top."""

    reaches: frozenset[str]
    deferred: bool = True


def _seam(*reaches: str, deferred: bool = True) -> Seam:
    return Seam(frozenset(reaches), deferred)


# Every place the core imports an optional part. The CLI's commands for the optional
# parts import them when they run; the runtime hands a turn to the runner only when one
# is running (runtime/turn/runner_link.py). The one piece of an optional part the core
# imports at their top are the boundary's check that a session's configuration holds no
# secret (boundary/config_secrets.py, with the credential rules it applies): admitting a
# session and `doctor` refuse what the boundary would refuse to publish.
SEAMS: dict[str, Seam] = {
    "turnkeeper/cli/chaos.py": _seam(HARNESS),
    "turnkeeper/cli/serve.py": _seam("server", "api"),
    "turnkeeper/cli/runner.py": _seam("runner"),
    "turnkeeper/cli/handoff.py": _seam("handoff"),
    "turnkeeper/cli/scan.py": _seam("boundary"),
    "turnkeeper/cli/maintenance.py": _seam("boundary.hooks"),
    "turnkeeper/runtime/turn/runner_link.py": _seam("runner"),
    "turnkeeper/runtime/services/session_admission.py": _seam(
        "boundary.config_secrets", deferred=False
    ),
    "turnkeeper/extensions/doctor.py": _seam("boundary.config_secrets", deferred=False),
}


@dataclass(frozen=True)
class Import:
    line: int
    module: str
    names: tuple[str, ...]
    deferred: bool  # inside a function, or under ``if TYPE_CHECKING:``


class _Imports(ast.NodeVisitor):
    """Every absolute import of a module, and whether it runs when the module loads."""

    def __init__(self) -> None:
        self.found: list[Import] = []
        self._depth = 0  # functions, and TYPE_CHECKING blocks, the visit is inside

    def _deferred(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._deferred(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._deferred(node)

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
        checking = name == "TYPE_CHECKING"
        self._depth += int(checking)
        for child in node.body:
            self.visit(child)
        self._depth -= int(checking)
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append(Import(node.lineno, alias.name, (), self._depth > 0))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and node.level == 0:
            names = tuple(a.name for a in node.names)
            self.found.append(Import(node.lineno, node.module, names, self._depth > 0))


def imports_in(source: str) -> list[Import]:
    visitor = _Imports()
    visitor.visit(ast.parse(source))
    return visitor.found


def optional_targets(found: Import) -> list[str]:
    """The optional modules an import reaches: ``server.app``, ``turnkeeper_chaos.workers``."""
    parts = found.module.split(".")
    if parts[0] == HARNESS:
        return [found.module]
    if parts[0] != "turnkeeper":
        return []
    # ``from turnkeeper import web``: each name is a package.
    dotted = list(found.names) if len(parts) == 1 else [".".join(parts[1:])]
    return [d for d in dotted if d.partition(".")[0] in OPTIONAL]


def _within(target: str, reach: str) -> bool:
    return target == reach or target.startswith(reach + ".")


def seam_violations(package: str, where: str, source: str) -> list[str]:
    """What in ``source`` (a module of ``package``, at ``where``) reaches an optional
    part the contract does not let it: a core module anywhere but at its declared seam
    (or at the top where the seam is deferred), any turnkeeper module the harness."""
    seam = SEAMS.get(where, Seam(frozenset()))
    broken: list[str] = []
    for found in imports_in(source):
        for target in optional_targets(found):
            is_harness = target.partition(".")[0] == HARNESS
            if package not in CORE and not is_harness:
                continue  # optional to optional: test_layers.py's MAY_IMPORT
            if not any(_within(target, reach) for reach in seam.reaches):
                whom = "turnkeeper" if is_harness else "the core"
                broken.append(
                    f"{where}:{found.line}: {whom} may not import {target} (no seam declared)"
                )
            elif seam.deferred and not found.deferred:
                broken.append(
                    f"{where}:{found.line}: {target} is imported at the top: import it "
                    "where it is used, so the core runs without it"
                )
    return broken


def test_every_package_is_core_or_optional() -> None:
    declared = set(MAY_IMPORT)
    assert CORE.isdisjoint(OPTIONAL)
    assert declared == CORE | set(OPTIONAL), "place the new package in CORE or OPTIONAL"
    assert {package_of(p) for p in PACKAGE.rglob("*.py")} <= declared


def test_the_harness_lives_beside_the_package() -> None:
    """Else the scans that read both would read an installed copy of one of them."""
    assert HARNESS_ROOT.parent == REPO and HARNESS_ROOT.name == HARNESS
    assert not (PACKAGE / "chaos").exists()


def test_every_optional_part_has_its_doc_and_architecture_links_it() -> None:
    architecture = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    for part, doc in OPTIONAL.items():
        assert (REPO / doc).is_file(), f"{part}: {doc} is missing"
        assert f"({doc.removeprefix('docs/')})" in architecture, f"{part}: link {doc}"


def test_the_core_reaches_optional_parts_only_at_its_seams() -> None:
    broken: list[str] = []
    reached: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(REPO).as_posix()
        source = path.read_text(encoding="utf-8")
        broken += seam_violations(package_of(path), where, source)
        if any(optional_targets(i) for i in imports_in(source)) and where in SEAMS:
            reached.add(where)
    assert broken == []
    # A seam the code no longer uses is a stale permission: remove it.
    assert reached == set(SEAMS), f"unused seams: {sorted(set(SEAMS) - reached)}"


def test_turnkeeper_imports_the_harness_only_when_the_chaos_command_runs() -> None:
    reaching = [w for w, seam in SEAMS.items() if any(_within(r, HARNESS) for r in seam.reaches)]
    assert reaching == ["turnkeeper/cli/chaos.py"]
    assert SEAMS["turnkeeper/cli/chaos.py"].deferred


@pytest.mark.parametrize(
    ("where", "source", "rule"),
    [
        # the core, outside any seam
        (
            "turnkeeper/runtime/turn/driver.py",
            "from turnkeeper.runner import RunnerClient\n",
            "the core may not import runner",
        ),
        ("turnkeeper/store/planted.py", "from turnkeeper import web\n", "may not import web"),
        (
            "turnkeeper/cli/status.py",
            "def f():\n    from turnkeeper.server.app import create_app\n",
            "may not import server.app",
        ),
        # a seam's import at the top, where it must be deferred
        (
            "turnkeeper/cli/serve.py",
            "from turnkeeper.server.app import create_app\n",
            "imported at the top",
        ),
        (
            "turnkeeper/cli/chaos.py",
            "import turnkeeper_chaos.harness\n",
            "imported at the top",
        ),
        # a seam reaching past what it declares
        (
            "turnkeeper/runtime/services/session_admission.py",
            "from turnkeeper.boundary.scanner import scan_index\n",
            "may not import boundary.scanner",
        ),
        # the harness, from anywhere else in turnkeeper — an optional part included
        (
            "turnkeeper/server/planted.py",
            "def f():\n    from turnkeeper_chaos import run_chaos\n",
            "turnkeeper may not import turnkeeper_chaos",
        ),
        (
            "turnkeeper/cli/run.py",
            "if TYPE_CHECKING:\n    from turnkeeper_chaos.workers import AGENT\n",
            "turnkeeper may not import turnkeeper_chaos.workers",
        ),
    ],
)
def test_a_wrong_reach_is_caught(where: str, source: str, rule: str) -> None:
    package = where.split("/")[1].removesuffix(".py")
    (found,) = seam_violations(package, where, source)
    assert rule in found and f"{where}:" in found


@pytest.mark.parametrize(
    ("where", "source"),
    [
        ("turnkeeper/cli/chaos.py", "def f():\n    from turnkeeper_chaos import run_chaos\n"),
        ("turnkeeper/cli/scan.py", "if TYPE_CHECKING:\n    from turnkeeper.boundary import R\n"),
        ("turnkeeper/extensions/doctor.py", "from turnkeeper.boundary.config_secrets import s\n"),
        ("turnkeeper/web/routes.py", "from turnkeeper.api import deps\n"),  # optional to optional
        ("turnkeeper/runtime/turn/driver.py", "from turnkeeper.runtime import turn\n"),
    ],
)
def test_a_declared_reach_passes(where: str, source: str) -> None:
    package = where.split("/")[1].removesuffix(".py")
    assert seam_violations(package, where, source) == []
