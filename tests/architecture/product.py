"""Where the product's source is: the ``turnkeeper`` package and, beside it in the same
repository and distribution, the chaos harness ``turnkeeper_chaos`` (docs/chaos.md).
The architecture tests that read "every module of the product" read both."""

from __future__ import annotations

from pathlib import Path

import turnkeeper
import turnkeeper_chaos

PACKAGE = Path(turnkeeper.__file__).parent
HARNESS = Path(turnkeeper_chaos.__file__).parent
REPO = PACKAGE.parent


def product_modules() -> list[Path]:
    """Every module of turnkeeper, then every module of turnkeeper_chaos."""
    return [*sorted(PACKAGE.rglob("*.py")), *sorted(HARNESS.rglob("*.py"))]
