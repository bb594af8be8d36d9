"""The HTTP API (``turnkeeper serve``): the CLI's operations over HTTP, under access
control (see docs/api.md).

``turnkeeper.api.app.create_app`` builds the application. This package's own
``__init__`` imports nothing, so the ``share`` commands and ``verify`` (which reads
the access stream through :mod:`turnkeeper.runtime.access`) never import FastAPI.
"""
