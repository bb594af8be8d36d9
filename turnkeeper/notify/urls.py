"""An endpoint's URL: what is accepted, and how it is shown (never its secrets)."""

from __future__ import annotations

import urllib.parse

from turnkeeper.errors import InvalidArgument


def check_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument(
            "the endpoint must be an http:// or https:// URL with a host",
            reason="bad_endpoint_url",
        )
    return url


def shown_url(url: str) -> str:
    """The URL as listed: without a password in it or its query (either may be a token)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    query = "?…" if parts.query else ""
    return f"{parts.scheme}://{host}{parts.path}{query}"
