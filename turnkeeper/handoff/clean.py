"""The leak check every packet passes before it is written.

A packet leaves the project it was made in, so it must not carry a credential or a
path that is only meaningful (or only private) on this machine. The check walks the
packet's JSON document and gives every key and every string to the boundary's line
rules (:func:`turnkeeper.boundary.scan_value`, the rules ``turnkeeper scan`` applies
to a commit): a match refuses the whole packet (``FAILED_PRECONDITION``,
``handoff_not_clean``) naming the field, the kind and the rule, never the matched
text itself (the refusal is printed).

Which of the boundary's kinds a packet is held to:

- ``credential``: every rule (API keys, tokens, private keys, a password in a URL, a
  high-entropy value assigned to a secret-like name). A packet has no use for one.
- ``local_path``: every rule (home directories, ``/root/``, ``/tmp/<dir>/...``, a
  Windows user directory), and on top of them this project's own locations: its
  root, the user's home and its sessions' workspaces, wherever they are.
- ``private_link``: a signed or token-bearing URL (``signed_url``) carries a
  credential. A URL of a private network's host (``private_host_url``) does not, nor
  does a loopback URL (no rule flags one): a monitor that polls a health endpoint on
  the goal's own machine or network is the goal's own work, and whoever adopts the
  goal runs it on theirs. A password or a token in such a URL is still refused, by
  the two rules above.
- ``transcript``, ``runtime_artifact``: what a file is by its name, its first bytes or
  its first lines; a packet's values are not files, and a packet leaves transcripts,
  sessions and turnkeeper's state out by construction (``omitted``).

Digests, git revisions and times are not credentials to the boundary's rules (no
secret-like name is assigned them), so a packet carries them as they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from turnkeeper.boundary import Kind, scan_value
from turnkeeper.errors import FailedPrecondition

# The boundary's kinds a packet value is held to, and the one rule among them it is
# not (the module docstring says why).
PACKET_KINDS: Final = frozenset({Kind.CREDENTIAL, Kind.LOCAL_PATH, Kind.PRIVATE_LINK})
PACKET_EXEMPT_RULES: Final = frozenset({"private_host_url"})
# The shape named when a value holds one of this project's own locations.
PROJECT_LOCATION: Final = "project_location"

_WHAT: Final = {
    Kind.CREDENTIAL: "a credential",
    Kind.LOCAL_PATH: "a local absolute path",
    Kind.PRIVATE_LINK: "a private link",
}


@dataclass(frozen=True)
class Leak:
    field: str  # where in the packet, e.g. ``evidence[0].command``
    kind: Kind  # ``credential``, ``local_path`` or ``private_link``
    shape: str  # the boundary rule that matched, or ``project_location``
    what: str  # that rule's description (never the matched text)


def find_leak(document: object, private_paths: Iterable[str] = ()) -> Leak | None:
    """The first credential, private link or local absolute path in ``document`` (a
    JSON value), or None. ``private_paths`` are this project's own locations (its
    root, its sessions' workspaces): any string containing one is a leak too."""
    paths = sorted({p.rstrip("/") for p in private_paths if len(p.rstrip("/")) > 1}, key=len)
    for field, text in _strings(document):
        leak = _leak_in(text, paths)
        if leak is not None:
            kind, shape, what = leak
            return Leak(field=field or "(packet)", kind=kind, shape=shape, what=what)
    return None


def check_clean(document: object, private_paths: Iterable[str] = ()) -> None:
    """Refuse ``document`` (``handoff_not_clean``) when :func:`find_leak` finds anything."""
    leak = find_leak(document, private_paths)
    if leak is None:
        return
    raise FailedPrecondition(
        f"the packet would carry {_WHAT[leak.kind]} ({leak.what}) in {leak.field}; "
        "nothing was written — change that value in the goal, or leave it to the "
        "original project",
        reason="handoff_not_clean",
        details={"field": leak.field, "kind": leak.kind.value, "shape": leak.shape},
    )


def _leak_in(text: str, paths: list[str]) -> tuple[Kind, str, str] | None:
    for finding in scan_value(text):
        if finding.kind in PACKET_KINDS and finding.rule not in PACKET_EXEMPT_RULES:
            return finding.kind, finding.rule, finding.what
    for path in paths:
        if path in text:
            return Kind.LOCAL_PATH, PROJECT_LOCATION, "a location of this project"
    return None


def _strings(document: object) -> Iterator[tuple[str, str]]:
    """Every key and string value of a JSON document with its field path, walked
    without recursion (a packet's payloads may be nested deeply)."""
    stack: list[tuple[str, object]] = [("", document)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            yield where, value
        elif isinstance(value, dict):
            items = list(value.items())
            for key, item in reversed(items):
                # A key that leaks is named by where it sits, never by itself.
                yield f"{where or '(packet)'} (a key)", str(key)
                stack.append((f"{where}.{key}" if where else str(key), item))
        elif isinstance(value, list):
            for index in reversed(range(len(value))):
                stack.append((f"{where}[{index}]", value[index]))
