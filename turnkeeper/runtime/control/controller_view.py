"""Whether the controller a session's lease names still runs: the one answer every
surface gives (``session show``/``list``, ``status``, the API, the web view).

A session's status cannot say it: a controller SIGKILLed mid-turn leaves its session
``running`` with a live lease until that lease expires. What can be proven from here
is in ``controller_identity``: a controller on this machine, boot and PID namespace
is alive or provably gone; one anywhere else is unknown, and only its lease's expiry
tells.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from turnkeeper.json_types import JsonDict

if TYPE_CHECKING:
    from turnkeeper.kernel.session import SessionState
    from turnkeeper.runtime.services.session_listing import SessionSummary


@dataclass(frozen=True)
class ControllerView:
    """Who drives a session by its lease, and whether that controller still runs.

    ``alive`` is False only when the lease owner is a controller on this machine, in
    this boot and PID namespace, whose process is provably gone; True when it provably
    runs; None when nothing here can tell (another machine, or an owner that is no
    controller of this version's naming) — then only the lease's expiry can.
    """

    owner: str
    alive: bool | None
    pid: int | None
    lease_expires_at: str | None

    def as_json(self) -> JsonDict:
        return {
            "owner": self.owner,
            "alive": self.alive,
            "pid": self.pid,
            "lease_expires_at": self.lease_expires_at,
        }

    def words(self) -> str:
        """One line for a person: e.g. ``controller gone (pid 7); lease expires at …``."""
        until = self.lease_expires_at or "-"
        pid = f"pid {self.pid}" if self.pid is not None else self.owner
        if self.alive is False:
            return f"controller gone ({pid}); lease expires at {until}"
        if self.alive:
            return f"controller running ({pid}); lease until {until}"
        return f"controller unknown ({self.owner}, not on this machine); lease expires at {until}"


def controller_of(lease_owner: str | None, lease_expires_at: str | None) -> ControllerView | None:
    """The one answer every surface gives about a session's controller (None: no lease
    is held). ``status``, ``session show``/``list``, the API and the web view use it."""
    if lease_owner is None:
        return None
    # Imported here: it reads /proc through the hosts' process tree, which a listing of
    # sessions that hold no lease never needs (tests/cli/test_startup_imports.py).
    from turnkeeper.runtime.control.controller_identity import can_probe, owner_is_dead

    if not can_probe(lease_owner):
        return ControllerView(lease_owner, None, None, lease_expires_at)
    pid = int(lease_owner.split(":")[4])  # can_probe checked the name's shape
    alive = not owner_is_dead(lease_owner)
    return ControllerView(lease_owner, alive, pid, lease_expires_at)


def state_controller(state: SessionState) -> ControllerView | None:
    """:func:`controller_of` for a decoded session (its expiry as its JSON writes it)."""
    lease = state.lease.model_dump(mode="json")
    return controller_of(state.lease.owner, lease["expires_at"])


def controller_json(found: ControllerView | None) -> JsonDict | None:
    """The ``controller`` key of a session in ``--json`` and the API (None: no lease)."""
    return None if found is None else found.as_json()


def summary_controller(summary: SessionSummary) -> ControllerView | None:
    """:func:`controller_of` for a listed session."""
    return controller_of(summary.lease_owner, summary.lease_expires_at)


def summaries_json(sessions: Iterable[SessionSummary]) -> list[JsonDict]:
    """Sessions as ``--json`` lists them (``session list``, ``status``): each state as
    parsed, and its ``controller`` (:func:`controller_json`)."""
    return [{**s.state, "controller": controller_json(summary_controller(s))} for s in sessions]
