"""Every process-global memo of the product is listed in docs/caches.md, with its rule.

A module-level dict, set or list that a module fills as it runs, a ``Memo``, and a
function under ``functools.cache`` / ``lru_cache`` are state that outlives any one
call: each must say when what it holds stops being true. docs/caches.md says it, one
row per memo, named ``path:name``; a new memo fails here until it has its row, and a
row whose memo is gone fails too, so the list stays the package as it is.
"""

from __future__ import annotations

import ast
import re

from tests.architecture.product import REPO, product_modules
from turnkeeper.memo import Memo

DOC = REPO / "docs" / "caches.md"
# The containers a module may fill as it runs (a constant table is a tuple, a
# frozenset or a literal with entries).
_CONTAINERS = ("dict[", "set[", "list[")
_CACHE_DECORATORS = frozenset({"cache", "lru_cache"})
_MEMO_CLASSES = frozenset({"Memo"})
# A private name in lower case: an upper-case one is a constant table by convention.
_STATE_NAME = re.compile(r"_[a-z0-9_]+")


def _decorator_name(node: ast.expr) -> str | None:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
        return target.attr if target.value.id == "functools" else None
    return target.id if isinstance(target, ast.Name) else None


def _is_empty_container(value: ast.expr | None) -> bool:
    if isinstance(value, ast.Dict | ast.List | ast.Set):
        return not (value.keys if isinstance(value, ast.Dict) else value.elts)
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id in ("dict", "set", "list")
        and not value.args
    )


def _is_memo(value: ast.expr | None) -> bool:
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name in _MEMO_CLASSES


def memos_in(source: str) -> list[str]:
    """The names of the memos ``source`` defines: module-level ``_lower_case`` containers
    (annotated as a dict, or an empty dict, set or list annotated as one), ``Memo``
    instances, and functions decorated with ``functools.cache`` / ``lru_cache``."""
    tree = ast.parse(source)
    found: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name, annotation = node.target.id, ast.unparse(node.annotation)
            if not _STATE_NAME.fullmatch(name):
                continue
            if (
                annotation.startswith("dict[")
                or (annotation.startswith(_CONTAINERS) and _is_empty_container(node.value))
                or _is_memo(node.value)
            ):
                found.append(name)
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            empty_dict = isinstance(node.value, ast.Dict) and not node.value.keys
            if empty_dict or _is_memo(node.value):
                found.extend(n for n in names if _STATE_NAME.fullmatch(n))
    for inner in ast.walk(tree):
        if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            _decorator_name(d) in _CACHE_DECORATORS for d in inner.decorator_list
        ):
            found.append(inner.name)
    return found


def package_memos() -> set[str]:
    return {
        f"{path.relative_to(REPO).as_posix()}:{name}"
        for path in product_modules()
        for name in memos_in(path.read_text())
    }


def listed_memos() -> set[str]:
    """Every ``path.py:name`` in backquotes in docs/caches.md."""
    return set(re.findall(r"`(turnkeeper(?:_chaos)?/[\w/]+\.py:\w+)`", DOC.read_text()))


def test_every_memo_of_the_package_is_listed_with_its_rule() -> None:
    unlisted = sorted(package_memos() - listed_memos())
    assert not unlisted, (
        "process-global memos missing from docs/caches.md (add a row: what it holds, "
        f"why it is kept, when it is invalid, who owns it): {unlisted}"
    )


def test_every_listed_memo_still_exists() -> None:
    gone = sorted(listed_memos() - package_memos())
    assert not gone, f"docs/caches.md lists memos the package no longer has: {gone}"


def test_the_scan_finds_each_kind_of_memo() -> None:
    source = (
        "import functools\n"
        "from functools import lru_cache\n"
        "_a: dict[str, int] = {}\n"
        "_b = {}\n"
        "_c: set[str] = set()\n"
        "_d: list[bool] = []\n"
        "_e: Memo[str, int] = Memo('e', max_entries=1, invalidation='never')\n"
        "_f = Memo('f', max_entries=1, invalidation='never')\n"
        "_table = {'a': 1}\n"  # a constant table: not a memo
        "_RULES: dict[str, int] = {'a': 1}\n"
        "_pair: tuple[int, int] = (1, 2)\n"
        "_seen: list[int] = [1]\n"
        "public: dict[str, int] = {}\n"
        "@functools.cache\ndef g() -> int: return 1\n"
        "@lru_cache(maxsize=4)\ndef h() -> int: return 1\n"
        "class K:\n    @functools.lru_cache\n    def m(self) -> int: return 1\n"
        "def plain() -> int: return 1\n"
    )
    assert memos_in(source) == ["_a", "_b", "_c", "_d", "_e", "_f", "g", "h", "m"]


def test_a_memo_is_bounded_oldest_first_and_forgets_on_request() -> None:
    memo: Memo[str, int] = Memo("test", max_entries=2, invalidation="never")
    memo.put("a", 1)
    memo.put("b", 2)
    memo.put("a", 3)  # put again: now the newest
    memo.put("c", 4)  # over the bound: the oldest, b, goes
    assert (memo.get("a"), memo.get("b"), memo.get("c")) == (3, None, 4)
    assert len(memo) == 2 and "b" not in memo
    memo.pop("a")
    memo.pop("a")  # not kept: nothing happens
    assert memo.get("a") is None and "c" in memo
    memo.clear()
    assert len(memo) == 0
