"""Hosts execute one turn of an agent: agent CLIs, Python callables, a scripted fake.

Public surface: the models and protocols in :mod:`turnkeeper.hosts.base`,
:func:`load_host`, and the process tracking in :mod:`turnkeeper.hosts.process_tree`.
"""

from turnkeeper.hosts.base import (
    MARKER_ENV,
    Host,
    HostOutcome,
    HostRun,
    HostSpawnFailed,
    KilledProcess,
    KillReport,
    TurnRequest,
)
from turnkeeper.hosts.registry import (
    ENTRY_POINT_GROUP,
    HostLoader,
    available_host_kinds,
    load_host,
)
from turnkeeper.vocabulary import HostErrorKind, HostStatus, TurnKind

__all__ = [
    "ENTRY_POINT_GROUP",
    "MARKER_ENV",
    "Host",
    "HostErrorKind",
    "HostLoader",
    "HostOutcome",
    "HostRun",
    "HostSpawnFailed",
    "HostStatus",
    "KillReport",
    "KilledProcess",
    "TurnKind",
    "TurnRequest",
    "available_host_kinds",
    "load_host",
]
