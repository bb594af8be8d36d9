"""Effect provider ``http``: apply is a request carrying the key in a header; readback
is a GET of a URL the user configures, with the key substituted.

Config::

    {"url": "https://api.example.com/orders",          # apply: {key} is substituted
     "method": "POST",                                  # POST (default), PUT, PATCH, DELETE
     "readback_url": "https://api.example.com/orders/by-key/{key}",   # must name {key}
     "key_header": "Idempotency-Key",                   # default
     "headers": {"Accept": "application/json"},         # sent with both calls
     "header_env": {"Authorization": "ORDERS_TOKEN"},   # header from an env var: the
                                                        # secret stays out of the log
     "timeout_seconds": 10}

Request (from the turn's result; all optional)::

    {"body": <any JSON, sent as application/json>, "headers": {"X-Note": "..."}}

Readback: 2xx -> applied (the response body, JSON if it is JSON, is the observed
value); 404 -> not_applied; anything else, or no answer -> unknown. Only the
standard library (``urllib``) is used.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from turnkeeper.effects._util import MAX_OUTPUT_BYTES, decode_output, substitute, validate_config
from turnkeeper.effects.base import ApplyResult, Readback, Request
from turnkeeper.errors import InvalidArgument

_REQUEST_FIELDS = frozenset({"body", "headers"})


class HttpProviderConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(pattern=r"^https?://")
    method: Literal["POST", "PUT", "PATCH", "DELETE"] = "POST"
    readback_url: str = Field(pattern=r"^https?://")
    key_header: str = Field(default="Idempotency-Key", min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)
    header_env: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: float = Field(default=10.0, gt=0, le=600)

    @field_validator("readback_url")
    @classmethod
    def _names_the_key(cls, value: str) -> str:
        if "{key}" not in value:
            raise ValueError("readback_url must contain {key}: a readback names one effect")
        return value


class HttpProvider:
    kind = "http"

    def __init__(self, config: Mapping[str, object] | None = None) -> None:
        self.config = validate_config(HttpProviderConfig, self.kind, dict(config or {}))

    def validate_request(self, request: Request) -> None:
        extra = sorted(set(request) - _REQUEST_FIELDS)
        headers = request.get("headers", {})
        if extra or not isinstance(headers, dict):
            raise InvalidArgument(
                "an http effect request has only 'body' and 'headers' (an object)",
                reason="invalid_effect_request",
                details={"unknown": extra},
            )
        if not all(isinstance(v, str) for v in headers.values()):
            raise InvalidArgument("header values are strings", reason="invalid_effect_request")

    def _headers(self, key: str, request: Request) -> dict[str, str]:
        extra = request.get("headers", {})
        headers = {k: str(v) for k, v in extra.items()} if isinstance(extra, dict) else {}
        headers.update(self.config.headers)
        for name, var in self.config.header_env.items():
            value = os.environ.get(var)
            if value is not None:
                headers[name] = value
        headers[self.config.key_header] = key
        return headers

    def apply(self, key: str, request: Request) -> ApplyResult:
        self.validate_request(request)
        headers = self._headers(key, request)
        data = None
        if "body" in request:
            data = json.dumps(request["body"]).encode()
            headers.setdefault("Content-Type", "application/json")
        url = substitute(self.config.url, urllib.parse.quote(key, safe=""))
        status, body, error = self._call(url, self.config.method, headers, data)
        if error:
            return ApplyResult(accepted=False, detail=error)
        return ApplyResult(
            accepted=200 <= status < 300, value=decode_output(body), detail=f"HTTP {status}"
        )

    def readback(self, key: str, request: Request) -> Readback:
        url = substitute(self.config.readback_url, urllib.parse.quote(key, safe=""))
        headers = self._headers(key, {})
        status, body, error = self._call(url, "GET", headers, None)
        if error:
            return Readback.unknown(error)
        if 200 <= status < 300:
            return Readback.applied(decode_output(body), f"HTTP {status}")
        if status == 404:
            return Readback.not_applied("HTTP 404")
        return Readback.unknown(f"HTTP {status}")

    def _call(
        self, url: str, method: str, headers: dict[str, str], data: bytes | None
    ) -> tuple[int, bytes, str]:
        """(status, body, error): ``error`` is set when no HTTP answer came back."""
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.config.timeout_seconds) as resp:
                return int(resp.status), resp.read(MAX_OUTPUT_BYTES + 1), ""
        except urllib.error.HTTPError as exc:
            with exc:
                return int(exc.code), exc.read(MAX_OUTPUT_BYTES + 1), ""
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return 0, b"", f"{type(exc).__name__}: {exc}"[:500]
