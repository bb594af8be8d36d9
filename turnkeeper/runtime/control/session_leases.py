"""The leases one controller holds: taken (over a holder proven dead, or an operator's
take-over of a live one), renewed while held (the lease keeper, and between turns
:meth:`SessionLeases.keep_fresh`), given back or forgotten."""

from __future__ import annotations

from contextlib import suppress
from datetime import timedelta
from typing import Literal

from turnkeeper.errors import Aborted, TurnkeeperError
from turnkeeper.kernel.session import (
    AcquireLease,
    LeaseToken,
    ReleaseLease,
    RenewLease,
    SessionState,
)
from turnkeeper.runtime.control.controller_identity import can_probe, owner_is_dead
from turnkeeper.runtime.control.session_stops import Say
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.turn.clock import SYSTEM_CLOCK, Clock
from turnkeeper.runtime.turn.fencing import LeaseDeadlines, takeover_due
from turnkeeper.runtime.turn.lease_keeper import LeaseKeeper, renewing


def _quiet(sid: str, event: str, text: str, *, named: bool = True, **fields: object) -> None:
    del sid, event, text, named, fields  # a one-shot command reports through its result


class SessionLeases:
    """The one lease service: the controller's (its keeper shared with the driver, which
    also keeps a running host's session) and a one-shot command's (``session stop``,
    ``revert``, ``delete``: a keeper of its own, for as long as the command holds one).
    """

    def __init__(
        self,
        sessions: SessionService,
        owner: str,
        lease_seconds: float,
        keeper: LeaseKeeper | None = None,
        say: Say = _quiet,
        clock: Clock = SYSTEM_CLOCK,
        deadlines: LeaseDeadlines | None = None,
    ) -> None:
        """``keeper``: the controller's, shared with its driver; without one, a keeper of
        this service's own on ``clock`` renews what it holds. ``deadlines``: where each
        acquire and renewal is confirmed for the host fence (the driver's)."""
        self._sessions = sessions
        self.owner = owner
        self.lease_seconds = lease_seconds
        self._deadlines = deadlines
        self._keeper = keeper or LeaseKeeper(
            renewing(sessions, self.token, lease_seconds, deadlines),
            lease_seconds / 3,
            clock,
            lease_seconds=lease_seconds,
        )
        self._say = say
        self._tokens: dict[str, LeaseToken] = {}

    def token(self, session_id: str) -> LeaseToken:
        return self._tokens[session_id]

    def held(self) -> list[str]:
        return list(self._tokens)

    def acquire(
        self,
        session_id: str,
        purpose: Literal["work", "delete"] = "work",
        *,
        take_over_live: str | None = None,
    ) -> LeaseToken:
        """The session's lease for this controller, taking over a holder proven dead.

        A closed session grants one only to delete it (``purpose="delete"``).
        ``take_over_live`` (an operator's reason, e.g. ``session stop``) takes over a
        live holder too: its next write is fenced off. The lease is renewed from now
        on until :meth:`release`.

        A lease that expired is taken over only once the fencing margin has passed
        too when its holder's processes cannot be seen from here (another machine,
        boot or PID namespace): until then it is refused as held, since only the
        holder's own fence ends its host (runtime/turn/fencing.py).
        """
        self._await_fencing(session_id)
        sent = self._deadlines.now() if self._deadlines is not None else 0.0
        started = self._keeper.monotonic()  # the keeper judges a lapse from here at most
        until = self._sessions.now() + timedelta(seconds=self.lease_seconds)
        try:
            done = self._sessions.execute(
                session_id, AcquireLease(owner=self.owner, expires_at=until, purpose=purpose)
            )
        except Aborted as held:
            previous = str(held.details.get("owner", ""))
            if held.reason != "lease_held":
                raise
            if take_over_live is not None:
                proof = f"taken over from live {previous}: {take_over_live}"
            elif owner_is_dead(previous):
                proof = f"process {previous} is gone"
                self._say(
                    session_id,
                    "lease_taken_over",
                    f"taking over the lease of dead controller {previous}",
                    named=False,
                    previous_owner=previous,
                )
            else:
                raise
            epoch = held.details["epoch"]
            if not isinstance(epoch, int):
                raise  # the kernel's lease_held refusal always names the epoch it holds
            token = LeaseToken(owner=previous, epoch=epoch)
            done = self._sessions.execute(
                session_id,
                AcquireLease(
                    owner=self.owner,
                    expires_at=until,
                    purpose=purpose,
                    takeover_from=token,
                    takeover_proof=proof[:2000],
                ),
            )
        assert done.state is not None
        if self._deadlines is not None:
            self._deadlines.confirmed(session_id, sent)
        token = LeaseToken(owner=self.owner, epoch=done.state.lease.epoch)
        if session_id not in self._tokens:
            self._keeper.hold(session_id, since=started)
        else:
            self._keeper.renewed(session_id, started)  # taken again (it had expired)
        self._tokens[session_id] = token
        return token

    def _await_fencing(self, session_id: str) -> None:
        lease = self._sessions.load(session_id).lease
        if lease.owner is None or lease.owner == self.owner or lease.expires_at is None:
            return
        if can_probe(lease.owner):
            return  # its death, or its hosts' end, can be proven from here
        due = takeover_due(lease.expires_at, self.lease_seconds)
        now = self._sessions.now()
        if lease.expires_at <= now < due:
            raise Aborted(
                f"the lease of {lease.owner} expired at {lease.expires_at.isoformat()}; its "
                f"host is ended by its own fencing, taken over from {due.isoformat()}",
                reason="lease_held",
                details={"owner": lease.owner, "epoch": lease.epoch, "fencing_until": due},
            )

    def release(self, session_id: str) -> None:
        token = self._tokens.pop(session_id, None)
        if self._deadlines is not None:
            self._deadlines.forget(session_id)
        if token is not None:
            self._keeper.drop(session_id)
            # Fenced off already means nothing of ours is left to release.
            with suppress(TurnkeeperError):
                self._sessions.execute(session_id, ReleaseLease(lease=token))

    def forget(self, session_id: str) -> None:
        """Stop renewing a lease that is no longer ours (taken over), or that this
        controller cannot reach the database to release: nothing to release."""
        if self._deadlines is not None:
            self._deadlines.forget(session_id)
        if self._tokens.pop(session_id, None) is not None:
            self._keeper.drop(session_id)

    def release_all(self) -> None:
        for sid in list(self._tokens):
            self.release(sid)

    def keep_fresh(self, session: SessionState) -> SessionState:
        """Renew the session's lease between turns once half of it is spent; the state after.

        The lease keeper renews it every third of its length; this covers a keeper
        that fell behind (a stalled machine) before a turn is accepted on it.
        """
        lease = session.lease
        # Read before the database's clock is: the lease is confirmed from no later.
        sent = self._deadlines.now() if self._deadlines is not None else 0.0
        started = self._keeper.monotonic()
        now = self._sessions.now()
        half = timedelta(seconds=self.lease_seconds / 2)
        if lease.expires_at is not None and lease.expires_at - now >= half:
            return session
        sid = session.session_id
        until = now + timedelta(seconds=self.lease_seconds)
        done = self._sessions.execute(sid, RenewLease(lease=self.token(sid), expires_at=until))
        if self._deadlines is not None:
            self._deadlines.confirmed(sid, sent)
        self._keeper.renewed(sid, started)
        return done.state if done.state is not None else self._sessions.load(sid)
