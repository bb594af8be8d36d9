"""The turn transaction: the driver and its durable commits, the lease keeper and the
clock it runs on, the host's events and receipt (in this process or the runner's),
the agent's result, its write-back, effects and evidence, and what a turn reports.

Imports only the runtime folders below it (tests/architecture/test_layers.py):
log, workspaces, services."""
