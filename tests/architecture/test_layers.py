"""The layer contract, executable: which turnkeeper package may import which.

Every top-level package (and top-level module) of turnkeeper is declared here with
the packages it may import; the declared graph has no cycle, so the layers read from
the bottom (``errors``) up (``cli``). Every import in every module counts — at the
top, inside functions, under ``TYPE_CHECKING`` — and no module imports a private
(``_``-named) module or name of another package. A new package fails here until it
is declared, and a wrong import fails naming the file, the line and the rule. The
chaos harness beside the package, ``turnkeeper_chaos``, is declared here too, as what
it may import of turnkeeper; which packages are the core and which optional parts,
and where the core may reach an optional part, is test_optional_parts.py.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

from tests.architecture.product import HARNESS as HARNESS_ROOT
from tests.architecture.product import PACKAGE as ROOT
from tests.architecture.product import product_modules

HARNESS = "turnkeeper_chaos"

# package -> the turnkeeper packages it may import (besides itself).
MAY_IMPORT: dict[str, frozenset[str]] = {
    name: frozenset(allowed)
    for name, allowed in {
        "errors": (),
        "json_types": (),  # JSON as Python types: a leaf every layer may use
        "crashpoints": (),  # the fault-injection switch: a leaf every layer may hit
        "memo": (),  # a named, bounded memo (docs/caches.md): a leaf every layer may use
        # Background loops that must keep running: every layer with one may supervise it.
        "supervision": ("errors",),
        "vocabulary": (),  # the words hosts and the session kernel share
        "host_reports": (),  # the records a host reports and the session kernel journals
        "brief": ("vocabulary",),  # what an agent is told at every turn (a model)
        "kernel": ("errors", "vocabulary", "host_reports"),  # pure: tests/kernel/test_purity.py
        # The optional parts (pyproject's extras) and the error naming a missing one.
        "extras": ("errors",),
        "store": ("errors", "extras"),
        "boundary": ("errors",),
        "hosts": ("errors", "vocabulary", "host_reports", "brief", "memo"),
        # The agent's tools: a per-turn channel and the MCP server (tools/).
        "tools": ("errors", "vocabulary", "host_reports", "brief", "kernel", "hosts"),
        "effects": ("errors", "vocabulary"),
        "extensions": ("errors", "boundary", "effects", "hosts", "kernel"),
        # Webhook notifications derived from the log (the runtime folds their stream).
        "notify": ("errors", "kernel", "store", "vocabulary"),
        "runner": ("errors", "crashpoints", "hosts", "vocabulary", "host_reports"),
        # Adapters for other frameworks' state (the LangGraph saver); the runtime folds
        # their streams for ``verify``.
        "integrations": ("errors", "store"),
        "runtime": (
            *("errors", "crashpoints", "kernel", "store", "boundary", "hosts", "effects"),
            *("extensions", "runner", "vocabulary", "host_reports", "brief", "tools"),
            *("notify", "memo", "integrations"),
        ),
        "handoff": ("errors", "boundary", "kernel", "runtime", "store"),
        "project_api": ("errors", "hosts", "kernel", "runtime", "store"),
        "api": ("errors", "kernel", "project_api", "runtime", "store", "notify"),
        "web": ("errors", "kernel", "api", "runtime", "store"),
        "server": ("errors", "api", "web", "store", "notify"),
        "cli": (
            *("errors", "crashpoints", "kernel", "store", "boundary", "hosts", "effects"),
            *("extensions", "runner", "runtime", "handoff", "project_api", "api", "server"),
            *("brief", "tools", "notify", "extras"),
        ),
        "__init__": ("project_api",),  # ``from turnkeeper import Project``
        # The chaos harness, a package of its own beside turnkeeper (docs/chaos.md): what
        # it may import of turnkeeper. Only cli/chaos.py imports it (test_optional_parts.py).
        HARNESS: (
            *("errors", "crashpoints", "effects", "hosts", "kernel", "runner", "runtime"),
            *("store", "extras"),
        ),
    }.items()
}
# Every package may type its JSON with the one leaf that defines it, and supervise its
# background loops with the one that does that (turnkeeper/supervision.py).
MAY_IMPORT = {
    name: allowed if name == "json_types" else allowed | {"json_types"}
    for name, allowed in MAY_IMPORT.items()
}
MAY_IMPORT = {
    name: allowed if name in ("supervision", "errors", "json_types") else allowed | {"supervision"}
    for name, allowed in MAY_IMPORT.items()
}


# runtime's own folders, lowest first: each may import only the folders before it.
RUNTIME_ORDER = ("log", "workspaces", "services", "turn", "control")
RUNTIME = ROOT / "runtime"


def runtime_violations(folder: str, where: str, source: str) -> list[str]:
    """What in ``source`` (a module of ``runtime/<folder>/``) imports a runtime folder
    above its own (or beside it, or a module at runtime's top level)."""
    below = RUNTIME_ORDER[: RUNTIME_ORDER.index(folder)]
    broken: list[str] = []
    for line, module, names in imports_of(source):
        parts = module.split(".")
        if parts[:2] != ["turnkeeper", "runtime"]:
            continue
        targets = [parts[2]] if len(parts) > 2 else names  # ``from turnkeeper.runtime import x``
        for target in targets:
            if target != folder and target not in below:
                broken.append(f"{where}:{line}: runtime/{folder} may not import runtime.{target}")
    return broken


def package_of(path: Path) -> str:
    if path.is_relative_to(HARNESS_ROOT):
        return HARNESS
    rel = path.relative_to(ROOT)
    return rel.parts[0].removesuffix(".py")


def imports_of(source: str) -> list[tuple[int, str, list[str]]]:
    """(line, module, names imported from it) of every absolute import in ``source``."""
    found: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module, [a.name for a in node.names]))
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def violations(package: str, where: str, source: str) -> list[str]:
    """What in ``source`` (a module of ``package``) breaks the contract."""
    allowed = MAY_IMPORT[package]
    broken: list[str] = []
    for line, module, names in imports_of(source):
        parts = module.split(".")
        if parts[0] != "turnkeeper":
            continue
        # ``from turnkeeper import X``: each X is a package (or ``__version__``).
        one_level = len(parts) == 1
        targets = [(n, [n]) for n in names] if one_level else [(parts[1], parts[2:] + names)]
        for target, rest in targets:
            if target in (package, "__version__"):
                continue
            if target not in allowed:
                broken.append(f"{where}:{line}: {package} may not import turnkeeper.{target}")
            elif any(_private(p) for p in rest):
                broken.append(
                    f"{where}:{line}: {module} {names}: a private name of another package"
                )
    return broken


def test_every_package_is_declared() -> None:
    found = {package_of(p) for p in ROOT.rglob("*.py")}
    assert found - set(MAY_IMPORT) == set(), "declare the new package in MAY_IMPORT"
    assert {package_of(p) for p in HARNESS_ROOT.rglob("*.py")} == {HARNESS}


def test_the_layers_have_no_cycle() -> None:
    try:
        order = list(TopologicalSorter(MAY_IMPORT).static_order())
    except CycleError as cycle:  # pragma: no cover - the message is the point
        pytest.fail(f"the declared layers have a cycle: {cycle.args[1]}")
    assert order.index("errors") < order.index("kernel") < order.index("runtime")
    assert order.index("runtime") < order.index("api") < order.index("web") < order.index("cli")


def test_every_module_keeps_to_its_layer() -> None:
    broken: list[str] = []
    modules = product_modules()
    assert len(modules) > 200 and any(package_of(p) == HARNESS for p in modules)
    for path in modules:
        where = str(path.relative_to(ROOT.parent))
        broken += violations(package_of(path), where, path.read_text())
    assert broken == []


def test_every_runtime_module_is_in_a_folder_and_keeps_to_its_order() -> None:
    assert {p.stem for p in RUNTIME.glob("*.py")} == {"__init__"}, "put it in a folder"
    folders = {p.name for p in RUNTIME.iterdir() if (p / "__init__.py").exists()}
    assert folders == set(RUNTIME_ORDER)
    broken: list[str] = []
    for path in sorted(RUNTIME.glob("*/*.py")):
        folder = path.relative_to(RUNTIME).parts[0]
        where = str(path.relative_to(ROOT.parent))
        broken += runtime_violations(folder, where, path.read_text())
    assert broken == []


@pytest.mark.parametrize(
    ("folder", "source", "rule"),
    [
        ("log", "from turnkeeper.runtime.services.goals import GoalService\n", "runtime.services"),
        ("turn", "def f():\n    from turnkeeper.runtime.control import worker\n", "control"),
        ("services", "from turnkeeper.runtime import turn\n", "may not import runtime.turn"),
    ],
)
def test_a_runtime_import_upward_is_caught(folder: str, source: str, rule: str) -> None:
    (found,) = runtime_violations(folder, f"turnkeeper/runtime/{folder}/planted.py", source)
    assert rule in found and "planted.py:" in found


@pytest.mark.parametrize(
    ("package", "source", "rule"),
    [
        ("kernel", "from turnkeeper.store import open_store\n", "may not import turnkeeper.store"),
        ("store", "def f():\n    from turnkeeper.runtime import goals\n", "may not import"),
        ("hosts", "import turnkeeper.cli.main\n", "may not import turnkeeper.cli"),
        ("api", "from turnkeeper import web\n", "may not import turnkeeper.web"),
        ("runner", "from turnkeeper.hosts._secret import x\n", "private name"),
        ("runtime", "from turnkeeper.kernel.session import _helper\n", "private name"),
        (HARNESS, "from turnkeeper.api import routes_goals\n", "may not import turnkeeper.api"),
        (HARNESS, "from turnkeeper.store._reads import x\n", "private name"),
    ],
)
def test_a_wrong_import_is_caught(package: str, source: str, rule: str) -> None:
    (found,) = violations(package, f"turnkeeper/{package}/planted.py", source)
    assert rule in found and "planted.py:" in found
