"""Shortened ids: the one rule every command resolves a typed id with.

Generated ids are long (``todo-3f9c2a1b7e``), so a user may type any unique
prefix. The rule, whatever the kind of id and wherever its candidates come from
(the store's entity index, or one goal's own criteria and obligations):

* an id that exists exactly is that id, even when it is also a prefix of others
  (``c1`` next to ``c10``);
* else a prefix that exactly one id starts with is that id;
* else a prefix several ids start with is ``INVALID_ARGUMENT`` (``ambiguous_id``),
  its details naming the first :data:`MAX_CANDIDATES` of them;
* else ``NOT_FOUND`` (``<kind>_not_found``).
"""

from __future__ import annotations

from collections.abc import Iterable

from turnkeeper.errors import InvalidArgument, NotFound

MAX_CANDIDATES = 10


def not_found(kind: str, text: str) -> NotFound:
    return NotFound(f"{kind} {text!r} not found", reason=f"{kind}_not_found", details={"id": text})


def pick_id(kind: str, text: str, candidates: Iterable[str]) -> str:
    """The id of ``kind`` that ``text`` names among ``candidates`` (see the module)."""
    if not text:
        raise InvalidArgument(
            f"{kind} id must not be empty", reason="empty_id", details={"kind": kind}
        )
    matches: set[str] = set()
    for candidate in candidates:
        if candidate == text:
            return text
        if candidate.startswith(text):
            matches.add(candidate)
    if not matches:
        raise not_found(kind, text)
    if len(matches) == 1:
        return matches.pop()
    ordered = sorted(matches)
    shown = ", ".join(ordered[:MAX_CANDIDATES])
    more = f" and {len(ordered) - MAX_CANDIDATES} more" if len(ordered) > MAX_CANDIDATES else ""
    raise InvalidArgument(
        f"{kind} id {text!r} is ambiguous: {len(ordered)} ids start with it "
        f"({shown}{more}); type more of it",
        reason="ambiguous_id",
        details={
            "kind": kind,
            "prefix": text,
            "candidates": ordered[:MAX_CANDIDATES],
            "matches": len(ordered),
        },
    )
