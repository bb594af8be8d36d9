"""Webhook notifications: tell a person when something needs them.

A project names endpoints (``turnkeeper notify add URL``) for the events a person
must act on — a gate opened, a session crashed or suspended, a goal closed, a turn
hung. The event log itself is the outbox: a deliverer derives each notification from
the session and goal streams' events after a per-endpoint cursor, POSTs it signed
(HMAC-SHA256) under an idempotency key that a restart does not change, and records
the delivery on the project's notifications stream, which advances the cursor. A
crash between the POST and that record sends it again, with the same key: delivery
is at least once (docs/notifications.md).

Modules, lowest first: ``records`` (the stream's versioned records and state),
``outbox`` (reading and appending that stream), ``urls`` (what an endpoint may be and
how it is shown), ``derive`` (events to notifications), ``signing`` (key, signature,
headers), ``post`` (one HTTP attempt), ``deliverer`` (the loop), ``endpoints`` (what
the CLI does), ``health`` (what ``status`` shows; it imports no kernel, as ``status``
must not).
"""
