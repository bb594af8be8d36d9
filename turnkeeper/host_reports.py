"""What a host reports about its turn and the session kernel journals, defined once.

A host names the process it started (:class:`ProcessIdentity`) and streams its events
(:class:`HostEvent`); the driver hands both to the kernel as they are, and recovery
signals the journaled identity without rebuilding it. Like :mod:`turnkeeper.vocabulary`
this is a leaf: the hosts and the kernel import it, it imports neither.

Fields are bounded as the kernel bounds what it records (a host event's kind and a
marker are ids of at most 200 characters), so a record a host could make is one the
log accepts.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue

ID_MAX_CHARS = 200  # every recorded id's bound, the kernel's too (kernel/limits.py)
ReportedId = Annotated[str, Field(min_length=1, max_length=ID_MAX_CHARS)]


class ProcessIdentity(BaseModel):
    """A process, named so that a recycled pid can never pass for it.

    ``start_time`` is field 22 of ``/proc/<pid>/stat`` (clock ticks since boot) and
    ``boot_id`` is ``/proc/sys/kernel/random/boot_id``: a pid is only ours if both
    still match. ``marker`` is the turn id carried in ``TURNKEEPER_TURN_ID``.

    This is the current shape only: session events of schema version 1 journaled an
    identity as ``start_fingerprint``, and turnkeeper/kernel/upcast.py reads them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    pid: int = Field(ge=1)
    start_time: int = Field(ge=0)
    boot_id: ReportedId
    marker: ReportedId

    @property
    def fingerprint(self) -> str:
        return f"{self.boot_id}:{self.start_time}"


class HostEvent(BaseModel):
    """One item of a turn's event stream (e.g. Codex ``item.completed``). ``seq``
    starts at 1 and has no gaps.

    ``at`` is when the host produced it (its line was read), stamped as it is stored:
    events are journaled in batches, so the record's own time is the batch's. None
    in a record written before events carried it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int = Field(ge=1)
    kind: ReportedId
    data: dict[str, JsonValue] = Field(default_factory=dict)
    at: AwareDatetime | None = None
