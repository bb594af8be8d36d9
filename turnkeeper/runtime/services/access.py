"""Who may use the HTTP API: the project's admin token and per-session shares.

Both are durable project state in the event store, on one stream of their own
(kind ``access``), so they work alike on SQLite and PostgreSQL, survive a restart of
``turnkeeper serve`` and are checked by ``verify`` like every other stream. Only the
sha256 of a token is ever stored: a stolen database grants nothing.

* The admin token reaches everything. ``serve`` records one at start (read from
  ``--token-file``, or generated and printed once); recording another replaces it,
  so a restart without a token file retires the token the last start printed.
* A share reaches one session and its turns, read-only or with update rights. It
  works until revoked, and stops working once its session is deleted.

No FastAPI here: the ``share`` commands use this module too.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter

from turnkeeper.errors import FailedPrecondition, InvalidArgument, NotFound
from turnkeeper.runtime.log.codec import StreamCodec, fold_from
from turnkeeper.runtime.log.streams import decide_and_append, load_stream
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.store.base import EventStore

ACCESS_KIND = "access"
ACCESS_STREAM = "access:project"
ACCESS_SCHEMA_VERSION = 1
ADMIN_TOKEN_PREFIX = "tka_"
SHARE_TOKEN_PREFIX = "tks_"
# A token of our own has 32 random bytes; one read from a file must not be guessable.
MIN_TOKEN_LENGTH = 16
MAX_TOKEN_LENGTH = 512

ShareMode = Literal["read", "update"]


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_token(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def check_token_text(token: str) -> str:
    """A token given by a person (``--token-file``): printable, no spaces, long enough."""
    token = token.strip()
    if not MIN_TOKEN_LENGTH <= len(token) <= MAX_TOKEN_LENGTH or not all(
        c.isprintable() and not c.isspace() for c in token
    ):
        raise InvalidArgument(
            f"a token is {MIN_TOKEN_LENGTH}-{MAX_TOKEN_LENGTH} printable characters without spaces",
            reason="bad_token",
        )
    return token


# --- the stream's records ---------------------------------------------------------------


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    schema_version: int = ACCESS_SCHEMA_VERSION
    at: AwareDatetime


class AdminTokenSet(_Record):
    type: Literal["access.admin_token_set"] = "access.admin_token_set"
    token_sha256: str = Field(min_length=64, max_length=64)


class ShareCreated(_Record):
    type: Literal["access.share_created"] = "access.share_created"
    share_id: str = Field(min_length=1, max_length=64)
    session_id: str = Field(min_length=1, max_length=64)
    mode: ShareMode
    token_sha256: str = Field(min_length=64, max_length=64)


class ShareRevoked(_Record):
    type: Literal["access.share_revoked"] = "access.share_revoked"
    share_id: str = Field(min_length=1, max_length=64)


AccessEvent = Annotated[AdminTokenSet | ShareCreated | ShareRevoked, Field(discriminator="type")]
# Built on first use, not at import (most commands never read the access stream).
ACCESS_EVENT_ADAPTER: TypeAdapter[AccessEvent] = TypeAdapter(
    AccessEvent, config=ConfigDict(defer_build=True)
)


class Share(BaseModel):
    """A share as ``share list`` shows it (never its token)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    share_id: str
    session_id: str
    mode: ShareMode
    created_at: AwareDatetime
    revoked_at: AwareDatetime | None = None
    token_sha256: str


class AccessState(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    schema_version: int = ACCESS_SCHEMA_VERSION
    admin_token_sha256: str | None = None
    admin_token_set_at: AwareDatetime | None = None
    shares: dict[str, Share] = Field(default_factory=dict)


def evolve_access(state: AccessState | None, event: AccessEvent) -> AccessState:
    state = state or AccessState()
    if isinstance(event, AdminTokenSet):
        return state.model_copy(
            update={"admin_token_sha256": event.token_sha256, "admin_token_set_at": event.at}
        )
    shares = dict(state.shares)
    if isinstance(event, ShareCreated):
        shares[event.share_id] = Share(
            share_id=event.share_id,
            session_id=event.session_id,
            mode=event.mode,
            created_at=event.at,
            token_sha256=event.token_sha256,
        )
    elif event.share_id in shares:
        shares[event.share_id] = shares[event.share_id].model_copy(update={"revoked_at": event.at})
    return state.model_copy(update={"shares": shares})


ACCESS_CODEC: StreamCodec[AccessState, AccessEvent] = StreamCodec(
    kind=ACCESS_KIND,
    state_type=AccessState,
    event_adapter=ACCESS_EVENT_ADAPTER,
    supported_versions={
        "access.admin_token_set": frozenset({1}),
        "access.share_created": frozenset({1}),
        "access.share_revoked": frozenset({1}),
    },
    fold_events=fold_from(AccessState, evolve_access),
    evolve_event=evolve_access,
)


# --- who is calling ---------------------------------------------------------------------


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: the admin, or the holder of one share."""

    kind: Literal["admin", "share"]
    share: Share | None = None

    @property
    def label(self) -> str:
        return "admin" if self.share is None else f"share:{self.share.share_id}"


@dataclass(frozen=True)
class CreatedShare:
    share: Share
    token: str  # shown once, never stored


class AccessService:
    """Tokens and shares of one project's store."""

    def __init__(self, store: EventStore) -> None:
        self._store = store

    def state(self) -> AccessState:
        state, _ = load_stream(self._store, ACCESS_CODEC, ACCESS_STREAM)
        return state or AccessState()

    def _append(self, event: AccessEvent) -> AccessState:
        done = decide_and_append(self._store, ACCESS_CODEC, ACCESS_STREAM, lambda _s: [event])
        assert done.state is not None
        return done.state

    def set_admin_token(self, token: str) -> None:
        """Make ``token`` the project's admin token (the previous one stops working)."""
        digest = token_digest(token)
        if self.state().admin_token_sha256 == digest:
            return  # the same token again (a restart with the same --token-file)
        self._append(AdminTokenSet(token_sha256=digest, at=self._store.now()))

    def create_share(self, session_ref: str, mode: ShareMode) -> CreatedShare:
        sessions = SessionService(self._store)
        sid = sessions.resolve_id(session_ref)
        if sessions.load(sid).status == "deleted":
            raise FailedPrecondition("the session was deleted", reason="session_deleted")
        token = new_token(SHARE_TOKEN_PREFIX)
        share_id = "share-" + secrets.token_hex(6)
        event = ShareCreated(
            share_id=share_id,
            session_id=sid,
            mode=mode,
            token_sha256=token_digest(token),
            at=self._store.now(),
        )
        return CreatedShare(self._append(event).shares[share_id], token)

    def list_shares(self) -> list[Share]:
        return sorted(self.state().shares.values(), key=lambda s: (s.created_at, s.share_id))

    def revoke_share(self, share_id: str) -> Share:
        share = self.state().shares.get(share_id)
        if share is None:
            raise NotFound(f"share {share_id!r} not found", reason="share_not_found")
        if share.revoked_at is not None:
            return share  # revoking twice changes nothing
        return self._append(ShareRevoked(share_id=share_id, at=self._store.now())).shares[share_id]

    def authenticate(self, token: str) -> Principal | None:
        """The caller ``token`` names, or None for a token this project does not know
        (or a revoked share's)."""
        digest = token_digest(token)
        state = self.state()
        if state.admin_token_sha256 is not None and secrets.compare_digest(
            state.admin_token_sha256, digest
        ):
            return Principal("admin")
        for share in state.shares.values():
            if share.revoked_at is None and secrets.compare_digest(share.token_sha256, digest):
                return Principal("share", share)
        return None


def share_json(share: Share) -> dict[str, str | None]:
    """A share for people and programs: everything but its token's hash."""
    return {
        "share_id": share.share_id,
        "session_id": share.session_id,
        "mode": share.mode,
        "created_at": share.created_at.isoformat(),
        "revoked_at": share.revoked_at.isoformat() if share.revoked_at else None,
    }
