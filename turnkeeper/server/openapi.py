"""Print the API's OpenAPI description (docs/openapi.json is this output, checked in):

python -m turnkeeper.server.openapi > docs/openapi.json
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from turnkeeper.json_types import JsonDict


def description() -> JsonDict:
    """The description the app serves at ``/v1/openapi.json`` (it needs no data: the
    app is built on an empty scratch store)."""
    from turnkeeper.server.app import create_app
    from turnkeeper.store import open_store

    with tempfile.TemporaryDirectory() as scratch:
        store = open_store(f"sqlite:///{Path(scratch) / 'scratch.db'}")
        try:
            return create_app(store, Path(scratch)).openapi()
        finally:
            store.close()


def main() -> None:
    sys.stdout.write(json.dumps(description(), indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
