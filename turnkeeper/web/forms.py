"""The fields of a form a page posts: htmx sends them URL-encoded.

Read here rather than with FastAPI's ``Form`` (which needs a multipart parser the
package does not depend on). A dependency of the route, so it runs after the access
check: a refused request's body is never read.
"""

from __future__ import annotations

import urllib.parse
from typing import Final

from fastapi import Request

from turnkeeper.errors import InvalidArgument

# A decision's form is a few fields of at most a title's length each.
MAX_FORM_BYTES: Final = 64 * 1024
MAX_FIELDS: Final = 20
FORM_TYPE: Final = "application/x-www-form-urlencoded"


async def form_fields(request: Request) -> dict[str, str]:
    """The posted form's fields (the last value of a repeated one)."""
    kind = request.headers.get("content-type", FORM_TYPE).split(";")[0].strip().lower()
    if kind != FORM_TYPE:
        raise InvalidArgument(f"a form is sent as {FORM_TYPE}", reason="malformed_form")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise InvalidArgument(
                f"the form is larger than {MAX_FORM_BYTES} bytes", reason="form_too_large"
            )
    try:
        pairs = urllib.parse.parse_qsl(
            bytes(body).decode("ascii"),
            keep_blank_values=True,
            encoding="utf-8",
            errors="strict",
            max_num_fields=MAX_FIELDS,
        )
    except (UnicodeDecodeError, ValueError):
        raise InvalidArgument(
            "the form is not URL-encoded UTF-8 (or has too many fields)", reason="malformed_form"
        ) from None
    return dict(pairs)
