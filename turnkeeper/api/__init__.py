"""The HTTP API's routes (``turnkeeper serve``): the CLI's operations over HTTP, under
access control (see docs/api.md).

:mod:`turnkeeper.server` assembles them with the web view into the application. This
package's own ``__init__`` imports nothing, so the ``share`` commands and ``verify``
(which reads the access stream through :mod:`turnkeeper.runtime.services.access`) never
import FastAPI.
"""
