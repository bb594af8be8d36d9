"""``.turnkeeper-allow.toml``: the findings a repository publishes on purpose, each with
the reason why.

    [[allow]]
    path = "docs/*.md"          # an fnmatch glob on the repository-relative path
    kind = "private_link"       # optional: only findings of this kind
    line = 12                   # optional: only this line (0: a whole-file finding)
    match = "localhost:8080"    # optional: only findings whose line contains this
    reason = "the install guide's example of a local server"

An entry without a reason (or with an empty one) is refused: an exception nobody can
explain is one nobody can review.
"""

from __future__ import annotations

import tomllib
from fnmatch import fnmatchcase
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from turnkeeper.boundary.rules import Finding, Kind
from turnkeeper.errors import InvalidArgument

ALLOW_LIST_NAME = ".turnkeeper-allow.toml"
_REASON = "allow_list_invalid"


class AllowEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(min_length=1)
    kind: Kind | None = None
    line: int | None = Field(default=None, ge=0)
    match: str | None = Field(default=None, min_length=1)
    reason: str = Field(min_length=1)

    def covers(self, finding: Finding) -> bool:
        return (
            fnmatchcase(finding.path, self.path)
            and (self.kind is None or finding.kind is self.kind)
            and (self.line is None or finding.line == self.line)
            and (self.match is None or self.match in finding.context)
        )


class AllowedFinding(Finding):
    """A finding an allow-list entry covers, with that entry's reason."""

    reason: str


class AllowList(BaseModel):
    entries: list[AllowEntry] = Field(default_factory=list)

    def reason_for(self, finding: Finding) -> str | None:
        """The reason of the first entry that covers ``finding``; None if none does."""
        for entry in self.entries:
            if entry.covers(finding):
                return entry.reason
        return None


def _refuse(message: str, **details: object) -> InvalidArgument:
    return InvalidArgument(message, reason=_REASON, details={"file": ALLOW_LIST_NAME, **details})


def _entry(number: int, raw: object) -> AllowEntry:
    if not isinstance(raw, dict):
        raise _refuse(f"{ALLOW_LIST_NAME}: allow entry {number} is not a table", entry=number)
    named = f"allow entry {number}" + (f" (path {raw['path']!r})" if "path" in raw else "")
    reason = raw.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise _refuse(
            f"{ALLOW_LIST_NAME}: {named} has no reason: say why this finding may be published",
            entry=number,
            path=raw.get("path"),
        )
    try:
        return AllowEntry.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "entry"
        raise _refuse(
            f"{ALLOW_LIST_NAME}: {named}: {field}: {first['msg']}",
            entry=number,
            field=field,
        ) from None


def parse_allow_list(text: str) -> AllowList:
    """The allow-list in ``text``; INVALID_ARGUMENT (``allow_list_invalid``) naming the
    entry when an entry is malformed or has no reason."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _refuse(f"{ALLOW_LIST_NAME} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"allow"})
    if unknown:
        raise _refuse(
            f"{ALLOW_LIST_NAME}: unknown key {unknown[0]!r} (only [[allow]] entries)",
            key=unknown[0],
        )
    raw = data.get("allow", [])
    if not isinstance(raw, list):
        raise _refuse(f"{ALLOW_LIST_NAME}: `allow` must be a list of [[allow]] tables")
    return AllowList(entries=[_entry(n, item) for n, item in enumerate(raw, start=1)])


def load_allow_list(root: Path) -> AllowList:
    """``root/.turnkeeper-allow.toml``, or an empty list when there is none."""
    path = root / ALLOW_LIST_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return AllowList()
    except OSError as exc:
        raise _refuse(f"cannot read {ALLOW_LIST_NAME}: {exc.strerror or exc}") from None
    return parse_allow_list(data.decode("utf-8", errors="replace"))
