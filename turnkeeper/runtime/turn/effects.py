"""Step 6 of the turn transaction: run the effects a turn's result requested.

For each effect, in order (its id ``e<n>`` and key ``<turn key>-e<n>`` are derived
from the durable receipt, so a restart finds the same ones):

1. record the **intent** durably (``turn.effect_intended``)        — crash point ``effect.intended``
2. **read back** first: an effect already applied (say, before a crash) is recorded
   applied without calling apply
3. only if the provider proves it **not applied**: ``apply(key)`` — crash point ``effect.applied``
4. read back again to confirm, and record the **outcome** durably
   (``turn.effect_resolved``: applied, or indeterminate)          — crash point ``effect.resolved``

Restart (the recovery row "written back, effects open") runs the same loop: an
effect intended but without an outcome is read back first — applied: recorded
applied; provably not applied: applied now; unknown: ``indeterminate``.

An ``indeterminate`` effect is never retried automatically (invariant 3): it opens
a blocking gate on the goal, named after the effect and its key, which the
terminal audit counts until an operator resolves it. The gate is opened after the
outcome is durable and again on every restart until the turn completes (its id is
derived, so opening twice is a no-op): a crash between the two loses neither.

An effect that cannot run — malformed, over the per-turn cap, its provider not
enabled in the session's ``effects`` config or not installed, or its request
refused by the provider's ``validate_request`` — is recorded ``rejected`` before
any provider call.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Literal

from pydantic import JsonValue

from turnkeeper.crashpoints import crash_point
from turnkeeper.effects import (
    EffectProvider,
    EffectsConfig,
    ProviderLoader,
    Readback,
    effects_config,
    load_provider,
)
from turnkeeper.errors import AlreadyExists, TurnkeeperError
from turnkeeper.kernel.limits import fit_title
from turnkeeper.kernel.proposals import OpenGate
from turnkeeper.kernel.session import (
    EffectReadback,
    LeaseToken,
    PlannedEffect,
    RecordEffectIntended,
    RecordEffectRejected,
    RecordEffectResolved,
    SessionState,
    plan_effects,
)
from turnkeeper.kernel.session.records import MAX_READBACK_BYTES
from turnkeeper.runtime.services.extension_settings import ExtensionSettings, ExtensionsState
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService

_VALUE_BUDGET = MAX_READBACK_BYTES - 256


def effect_gate_id(turn_id: str, effect_id: str) -> str:
    """The goal gate an indeterminate effect opens: one per effect, forever."""
    return f"effect-{turn_id}-{effect_id}"


@dataclass
class EffectsSummary:
    """What one pass over a turn's effects recorded (empty when it had none to do)."""

    applied: list[str] = field(default_factory=list)
    indeterminate: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    apply_calls: int = 0

    @property
    def handled(self) -> bool:
        return bool(self.applied or self.indeterminate or self.rejected)

    def describe(self) -> str:
        parts = [
            f"{name}: {', '.join(ids)}"
            for name, ids in (
                ("applied", self.applied),
                ("indeterminate", self.indeterminate),
                ("rejected", self.rejected),
            )
            if ids
        ]
        return f"{'; '.join(parts)} ({self.apply_calls} apply calls)"


def _bounded(value: JsonValue) -> JsonValue:
    text = json.dumps(value, separators=(",", ":"), default=str)
    if len(text) <= _VALUE_BUDGET:
        return value
    digest = hashlib.sha256(text.encode()).hexdigest()
    return {"truncated": True, "bytes": len(text), "sha256": digest, "prefix": text[:1024]}


def _to_record(readback: object, note: str = "") -> EffectReadback:
    if not isinstance(readback, Readback):
        return EffectReadback(status="unknown", detail=f"readback returned {type(readback)}")
    detail = f"{readback.detail}; {note}" if note and readback.detail else note or readback.detail
    value = _bounded(readback.value) if readback.status == "applied" else None
    return EffectReadback(status=readback.status, value=value, detail=detail[:2000])


class EffectRunner:
    def __init__(
        self,
        sessions: SessionService,
        goals: GoalService,
        token: Callable[[str], LeaseToken],
        loader: ProviderLoader = load_provider,
    ):
        self._sessions = sessions
        self._goals = goals
        self._token = token
        self._loader = loader

    def settle(self, session_id: str, turn_id: str) -> EffectsSummary:
        """Give every effect the in-flight turn requested an outcome; idempotent."""
        summary = EffectsSummary()
        state = self._sessions.load(session_id)
        turn = state.in_flight
        if turn is None or turn.envelope.turn_id != turn_id or turn.receipt is None:
            return summary
        plan = plan_effects(turn.receipt.result, turn.envelope.idempotency_key)
        if not plan:
            return summary
        providers = _Providers(state, self._loader, ExtensionSettings(self._sessions.store).state())
        for item in plan:
            entry = turn.effect(item.effect_id)
            if entry is None:
                outcome = self._start(state, item, providers, summary)
            elif entry.outcome == "open":
                outcome = self._resolve(state, item, providers.get(item.provider), summary)
            else:
                outcome = entry.outcome
            if outcome == "indeterminate":
                self._open_gate(state, item)
        return summary

    # --- one effect -----------------------------------------------------------------------

    def _start(
        self,
        state: SessionState,
        item: PlannedEffect,
        providers: _Providers,
        summary: EffectsSummary,
    ) -> str:
        provider = None
        refusal = (item.rejection, item.detail) if item.rejection else None
        if refusal is None:
            refusal = providers.disabled(item.provider)
        if refusal is None:
            found = providers.get(item.provider)
            if isinstance(found, tuple):
                refusal = found
            else:
                provider = found
                refusal = _refused_request(found, item)
        if refusal is not None or provider is None:
            reason, detail = refusal or ("provider_unavailable", "")
            self._execute(
                state,
                RecordEffectRejected(
                    lease=self._token(state.session_id),
                    turn_id=self._turn_id(state),
                    effect_id=item.effect_id,
                    reason=reason,
                    detail=detail[:2000],
                ),
            )
            summary.rejected.append(item.effect_id)
            return "rejected"
        self._execute(
            state,
            RecordEffectIntended(
                lease=self._token(state.session_id),
                turn_id=self._turn_id(state),
                effect_id=item.effect_id,
                idempotency_key=item.idempotency_key,
                provider=item.provider,
                request=item.request,
            ),
        )
        crash_point("effect.intended")
        return self._resolve(state, item, provider, summary)

    def _resolve(
        self,
        state: SessionState,
        item: PlannedEffect,
        provider: EffectProvider | tuple[str, str],
        summary: EffectsSummary,
    ) -> str:
        apply_called = False
        if isinstance(provider, tuple):
            # Intended before, but the provider cannot be loaded now: nobody can tell.
            final = EffectReadback(status="unknown", detail=f"provider unavailable: {provider[1]}")
        else:
            final = self._readback(provider, item)
            if final.status == "not_applied":
                note = self._apply(provider, item)
                apply_called = True
                summary.apply_calls += 1
                crash_point("effect.applied")
                final = self._readback(provider, item, note=note)
        outcome: Literal["applied", "indeterminate"] = (
            "applied" if final.status == "applied" else "indeterminate"
        )
        self._execute(
            state,
            RecordEffectResolved(
                lease=self._token(state.session_id),
                turn_id=self._turn_id(state),
                effect_id=item.effect_id,
                outcome=outcome,
                readback=final,
                apply_called=apply_called,
            ),
        )
        crash_point("effect.resolved")
        (summary.applied if outcome == "applied" else summary.indeterminate).append(item.effect_id)
        return outcome

    def _readback(
        self, provider: EffectProvider, item: PlannedEffect, note: str = ""
    ) -> EffectReadback:
        try:
            return _to_record(provider.readback(item.idempotency_key, item.request), note)
        except Exception as exc:  # a provider's failure is an answer: unknown
            detail = f"readback raised {type(exc).__name__}: {exc}"
            return EffectReadback(status="unknown", detail=f"{detail}; {note}"[:2000])

    def _apply(self, provider: EffectProvider, item: PlannedEffect) -> str:
        try:
            result = provider.apply(item.idempotency_key, item.request)
        except Exception as exc:  # the readback that follows decides the outcome
            return f"apply raised {type(exc).__name__}: {exc}"[:500]
        return f"apply: {getattr(result, 'detail', '')}"[:500]

    def _open_gate(self, state: SessionState, item: PlannedEffect) -> None:
        turn_id = self._turn_id(state)
        title = (
            f"Effect {item.effect_id} ({item.provider}) of turn {turn_id} is indeterminate: "
            f"check key {item.idempotency_key} at the provider, then resolve this gate"
        )
        # The provider's name comes from the host config: keep the title a title.
        title = fit_title("".join(c if c.isprintable() else "?" for c in title))
        gate = OpenGate(gate_id=effect_gate_id(turn_id, item.effect_id), title=title)
        # Opened before a crash, or resolved by the operator since: either is fine.
        with suppress(AlreadyExists):
            self._goals.submit(state.goal_id, gate)

    # --- plumbing ---------------------------------------------------------------------------

    def _turn_id(self, state: SessionState) -> str:
        assert state.in_flight is not None
        return state.in_flight.envelope.turn_id

    def _execute(
        self,
        state: SessionState,
        command: RecordEffectIntended | RecordEffectRejected | RecordEffectResolved,
    ) -> None:
        self._sessions.execute(state.session_id, command)


def _refused_request(provider: EffectProvider, item: PlannedEffect) -> tuple[str, str] | None:
    check = getattr(provider, "validate_request", None)
    if check is None:
        return None
    try:
        check(item.request)
    except TurnkeeperError as error:
        return "invalid_effect_request", error.message
    except Exception as exc:
        return "invalid_effect_request", f"{type(exc).__name__}: {exc}"
    return None


class _Providers:
    """The session's authorised providers, loaded once per pass; a failure is a reason."""

    def __init__(self, state: SessionState, loader: ProviderLoader, settings: ExtensionsState):
        self._loader = loader
        self._settings = settings
        self._cache: dict[str, EffectProvider | tuple[str, str]] = {}
        self._config: EffectsConfig | None = None
        self._config_error: tuple[str, str] | None = None
        try:
            self._config = effects_config(state.host_config)
        except TurnkeeperError as error:
            self._config_error = (error.reason, error.message)

    def disabled(self, name: str) -> tuple[str, str] | None:
        """The refusal of a new effect of a provider whose kind the project disabled.
        (An effect started before is still read back, so none is left in doubt.)"""
        spec = self._config.spec(name) if self._config is not None else None
        if spec is None:
            return None  # not authorised at all: refused as such by get()
        why = self._settings.disabled_reason("effect", spec.kind)
        if why is None:
            return None
        return (
            "provider_disabled",
            f"PERMISSION_DENIED: effect provider {spec.kind!r} is disabled in this project "
            f"({why}); turnkeeper extensions enable {spec.kind}",
        )

    def get(self, name: str) -> EffectProvider | tuple[str, str]:
        if name not in self._cache:
            self._cache[name] = self._load(name)
        return self._cache[name]

    def _load(self, name: str) -> EffectProvider | tuple[str, str]:
        if self._config is None:
            return self._config_error or ("invalid_effects_config", "")
        spec = self._config.spec(name)
        if spec is None:
            # Installed is not authorised: only what the session's config names runs.
            return (
                "provider_not_authorised",
                f"PERMISSION_DENIED: the session does not authorise the effect provider "
                f"{name!r} (name it under effects.providers in its host config)",
            )
        try:
            return self._loader(spec.kind, dict(spec.config))
        except TurnkeeperError as error:
            return error.reason or "provider_unavailable", error.message
        except Exception as exc:
            return "provider_unavailable", f"{type(exc).__name__}: {exc}"
