"""Driving sessions: the control loop and the workers sharing a database, the leases a
controller holds, the scheduler, restart recovery, settling and stopping, the
operator's commands and durable operations, and what ``run`` is told.

Imports only the runtime folders below it (tests/architecture/test_layers.py):
log, workspaces, services, turn."""
