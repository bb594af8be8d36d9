"""The services over the streams: goals and sessions, the folder that knows every
stream kind, creating and listing sessions and their turns, snapshots and workspace
claims checked against the log, access and extension settings, the project.

Imports only the runtime folders below it (tests/architecture/test_layers.py):
log, workspaces."""
