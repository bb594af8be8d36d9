"""Each extension's three states side by side, as ``status``, the API and the web view
show them: installed (declared here), ready (what ``doctor`` last found on this
machine), authorised (which live sessions name it) — and whether the project enabled it.

Read from package metadata, the extension settings stream and the sessions' listing
rows only: nothing is imported or run, so ``status`` stays fast.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from turnkeeper.extensions.declared import declared_extensions
from turnkeeper.extensions.findings import Group
from turnkeeper.extensions.findings import Status as Verdict
from turnkeeper.json_types import JsonMapping
from turnkeeper.runtime.services.extension_settings import (
    ExtensionSettings,
    ExtensionsState,
    Readiness,
    extension_key,
)
from turnkeeper.runtime.services.session_listing import SessionSummary
from turnkeeper.store.base import EventStore

# Sessions that will never run a turn again authorise nothing.
_FINISHED = frozenset({"closed", "deleted"})


def this_machine() -> str:
    return socket.gethostname() or "localhost"


class ExtensionStatus(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    group: Group
    installed: bool  # an entry point declares it on this machine
    package: str | None = None
    version: str | None = None
    enabled: bool = True  # the project's setting
    disabled_reason: str | None = None
    # This machine's last doctor verdict (None: never checked here), and every
    # machine's last, for a project whose workers run on several.
    ready: Verdict | None = None
    ready_detail: str = ""
    checked_at: datetime | None = None
    checks: list[Readiness] = []
    authorised_by: list[str] = []  # live sessions whose configuration names it


def session_uses(host_kind: str, host_config: JsonMapping) -> set[tuple[Group, str]]:
    """What a session's configuration authorises: its host kind and each provider
    kind under ``effects.providers`` (read as stored, not validated: for display)."""
    used: set[tuple[Group, str]] = {("host", host_kind)}
    effects = host_config.get("effects")
    providers = effects.get("providers") if isinstance(effects, Mapping) else None
    if isinstance(providers, Mapping):
        for name, spec in providers.items():
            kind = spec.get("kind", name) if isinstance(spec, Mapping) else name
            if isinstance(kind, str):
                used.add(("effect", kind))
    return used


def extension_states(
    settings: ExtensionsState,
    sessions: Iterable[tuple[str, str, str, JsonMapping]],
    machine: str | None = None,
) -> list[ExtensionStatus]:
    """Every extension installed, used by a live session or disabled; ``sessions`` as
    (session id, status, host kind, host config)."""
    machine = machine or this_machine()
    authorised: dict[tuple[Group, str], list[str]] = {}
    for sid, status, host_kind, host_config in sessions:
        if status in _FINISHED:
            continue
        for used in session_uses(host_kind, host_config):
            authorised.setdefault(used, []).append(sid)
    declared = {(d.group, d.name): d for d in declared_extensions()}
    disabled = set(settings.disabled_extensions())
    rows: list[ExtensionStatus] = []
    for group, name in sorted(set(declared) | set(authorised) | disabled):
        found = declared.get((group, name))
        checks = settings.readiness.get(extension_key(group, name), {})
        here = checks.get(machine)
        why = settings.disabled_reason(group, name)
        rows.append(
            ExtensionStatus(
                name=name,
                group=group,
                installed=found is not None,
                package=found.package if found else None,
                version=found.version if found else None,
                enabled=why is None,
                disabled_reason=why,
                ready=here.verdict if here else None,
                ready_detail=here.detail if here else "",
                checked_at=here.at if here else None,
                checks=sorted(checks.values(), key=lambda r: r.machine),
                authorised_by=sorted(authorised.get((group, name), [])),
            )
        )
    rows.sort(key=lambda r: (r.group != "host", r.name))
    return rows


def project_extension_states(
    store: EventStore, sessions: Iterable[SessionSummary]
) -> list[ExtensionStatus]:
    """:func:`extension_states` of a project, from its sessions' listing rows."""
    return extension_states(
        ExtensionSettings(store).state(),
        [(s.session_id, s.status, s.host_kind, s.host_config) for s in sessions],
    )
