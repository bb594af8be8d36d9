"""Which extensions a project lets its sessions use, and what ``doctor`` last found.

Installed, ready and authorised are three states of an extension (a host kind or an
effect provider), kept apart:

* **installed** — an entry point declares it on this machine (:mod:`turnkeeper.extensions`);
* **ready** — ``turnkeeper doctor`` found it able to work here; each run inside a
  project records its verdict per machine on this stream, so ``status`` can say what
  the last check found without running agent CLIs itself;
* **authorised** — a session's configuration names it (its host kind, or a provider
  under ``effects.providers``); nothing else runs.

On top of those, a project may **disable** an extension (``turnkeeper extensions
disable NAME``): no session is created on a disabled host kind, a session on one is
suspended before its next turn, and a disabled effect provider's effects are refused
with nothing run. The setting lives in the event store, on one stream of its own
(kind ``extensions``), so every worker sharing a PostgreSQL database sees it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter

from turnkeeper.extensions.findings import ExtensionVerdict, Group
from turnkeeper.extensions.findings import Status as Verdict
from turnkeeper.runtime.log.codec import StreamCodec, fold_from
from turnkeeper.runtime.log.streams import decide_and_append, load_stream
from turnkeeper.store.base import EventStore

EXTENSIONS_KIND = "extensions"
EXTENSIONS_STREAM = "extensions:project"
EXTENSIONS_SCHEMA_VERSION = 1
MAX_REASON_CHARS = 500


def extension_key(group: Group, name: str) -> str:
    """One extension's key: host kinds and effect providers may share a name."""
    return f"{group}:{name}"


# --- the stream's records ---------------------------------------------------------------


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    schema_version: int = EXTENSIONS_SCHEMA_VERSION
    at: AwareDatetime


class ExtensionDisabled(_Record):
    type: Literal["extensions.disabled"] = "extensions.disabled"
    group: Group
    name: str = Field(min_length=1, max_length=200)
    reason: str = Field(default="", max_length=MAX_REASON_CHARS)
    by: str = Field(default="", max_length=200)


class ExtensionEnabled(_Record):
    type: Literal["extensions.enabled"] = "extensions.enabled"
    group: Group
    name: str = Field(min_length=1, max_length=200)
    by: str = Field(default="", max_length=200)


class ExtensionsChecked(_Record):
    """One ``doctor`` run on one machine: its verdict for each extension it checked."""

    type: Literal["extensions.checked"] = "extensions.checked"
    machine: str = Field(min_length=1, max_length=255)
    checked: list[ExtensionVerdict] = Field(max_length=1000)


ExtensionsEvent = Annotated[
    ExtensionDisabled | ExtensionEnabled | ExtensionsChecked, Field(discriminator="type")
]
# Built on first use, not at import: ``status`` reads the settings' projection only.
EXTENSIONS_EVENT_ADAPTER: TypeAdapter[ExtensionsEvent] = TypeAdapter(
    ExtensionsEvent, config=ConfigDict(defer_build=True)
)


class Disabled(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    reason: str
    by: str
    at: AwareDatetime


class Readiness(BaseModel):
    """What the last doctor run on a machine found for one extension."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    machine: str
    verdict: Verdict
    problems: int
    detail: str
    at: AwareDatetime


class ExtensionsState(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    schema_version: int = EXTENSIONS_SCHEMA_VERSION
    disabled: dict[str, Disabled] = Field(default_factory=dict)  # by extension_key
    # extension_key -> machine -> the last verdict there
    readiness: dict[str, dict[str, Readiness]] = Field(default_factory=dict)

    def disabled_extensions(self) -> list[tuple[Group, str]]:
        """(group, name) of every extension the project disabled."""
        found: list[tuple[Group, str]] = []
        for key in self.disabled:
            group, _, name = key.partition(":")
            found.append(("host" if group == "host" else "effect", name))
        return found

    def disabled_reason(self, group: Group, name: str) -> str | None:
        """Why the project disabled the extension, or None while it is enabled."""
        found = self.disabled.get(extension_key(group, name))
        if found is None:
            return None
        return found.reason or "disabled in this project"


def evolve_extensions(state: ExtensionsState | None, event: ExtensionsEvent) -> ExtensionsState:
    state = state or ExtensionsState()
    if isinstance(event, ExtensionsChecked):
        readiness = {key: dict(machines) for key, machines in state.readiness.items()}
        for item in event.checked:
            readiness.setdefault(extension_key(item.group, item.name), {})[event.machine] = (
                Readiness(
                    machine=event.machine,
                    verdict=item.verdict,
                    problems=item.problems,
                    detail=item.detail,
                    at=event.at,
                )
            )
        return state.model_copy(update={"readiness": readiness})
    disabled = dict(state.disabled)
    key = extension_key(event.group, event.name)
    if isinstance(event, ExtensionDisabled):
        disabled[key] = Disabled(reason=event.reason, by=event.by, at=event.at)
    else:
        disabled.pop(key, None)
    return state.model_copy(update={"disabled": disabled})


EXTENSIONS_CODEC: StreamCodec[ExtensionsState, ExtensionsEvent] = StreamCodec(
    kind=EXTENSIONS_KIND,
    state_type=ExtensionsState,
    event_adapter=EXTENSIONS_EVENT_ADAPTER,
    supported_versions={
        "extensions.disabled": frozenset({1}),
        "extensions.enabled": frozenset({1}),
        "extensions.checked": frozenset({1}),
    },
    fold_events=fold_from(ExtensionsState, evolve_extensions),
    evolve_event=evolve_extensions,
)


class ExtensionSettings:
    """The project's extension settings in one store."""

    def __init__(self, store: EventStore) -> None:
        self._store = store

    def state(self) -> ExtensionsState:
        state, _ = load_stream(self._store, EXTENSIONS_CODEC, EXTENSIONS_STREAM)
        return state or ExtensionsState()

    def _append(self, events: list[ExtensionsEvent]) -> ExtensionsState:
        done = decide_and_append(
            self._store, EXTENSIONS_CODEC, EXTENSIONS_STREAM, lambda _s: events
        )
        return done.state or ExtensionsState()

    def disable(self, group: Group, name: str, reason: str, by: str) -> ExtensionsState:
        """Disable it (again: the new reason replaces the old one)."""
        at = self._store.now()
        event = ExtensionDisabled(group=group, name=name, reason=reason.strip(), by=by, at=at)
        return self._append([event])

    def enable(self, group: Group, name: str, by: str) -> ExtensionsState:
        """Enable it; enabling what is not disabled writes nothing."""
        state = self.state()
        if state.disabled_reason(group, name) is None:
            return state
        return self._append([ExtensionEnabled(group=group, name=name, by=by, at=self._store.now())])

    def record_check(self, machine: str, checked: list[ExtensionVerdict]) -> None:
        if checked:
            event = ExtensionsChecked(machine=machine, checked=checked, at=self._store.now())
            self._append([event])


def disabled_host_reason(store: EventStore, host_kind: str) -> str | None:
    """Why the project disabled host kind ``host_kind`` (None: it may run)."""
    # Asked before every turn: a project that never touched its settings (no stream)
    # disables nothing, without building an empty state to say so.
    state, _ = load_stream(store, EXTENSIONS_CODEC, EXTENSIONS_STREAM)
    return state.disabled_reason("host", host_kind) if state is not None else None
