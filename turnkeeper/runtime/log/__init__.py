"""The event log's shell: decide-then-append on one stream, the codec between kernel
and store, and how ids (shortened, or a client's request id) are resolved.

Imports only the runtime folders below it (tests/architecture/test_layers.py):
none."""
