"""A session's workspace: probing it, its snapshots at every completed turn, and a
revert's restore of the worktree and HEAD, with git itself.

Imports only the runtime folders below it (tests/architecture/test_layers.py):
log."""
