"""One HTTP attempt: POST a body, and say whether the endpoint took it.

The standard library's client (no dependency): a 2xx answer is taken, anything
else — another status, a refused connection, a timeout — is a failure described in
one short line (never the URL, which may hold a token, nor the request's headers).
Redirects are not followed: a signed notification goes where it was configured to.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Final

TIMEOUT_SECONDS: Final = 10.0
MAX_REASON_CHARS: Final = 200


@dataclass(frozen=True)
class Outcome:
    ok: bool
    status_code: int | None
    error: str  # empty when ok


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: object,
        code: int,
        msg: str,
        headers: object,
        newurl: str,
    ) -> None:
        return None  # the 3xx is then an HTTPError: a failure naming its status


_OPENER: Final = urllib.request.build_opener(_NoRedirects())


def post(
    url: str, body: bytes, headers: dict[str, str], timeout: float = TIMEOUT_SECONDS
) -> Outcome:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _OPENER.open(request, timeout=timeout) as answer:
            status = int(answer.status)
            answer.read(65_536)  # a keep-alive peer expects its answer read
    except urllib.error.HTTPError as error:
        reason = " ".join(str(error.reason).split())[:MAX_REASON_CHARS]
        return Outcome(False, error.code, f"HTTP {error.code} {reason}".strip())
    except urllib.error.URLError as error:
        return Outcome(False, None, _describe(error.reason))
    except TimeoutError:
        return Outcome(False, None, f"no answer within {timeout:g}s")
    except ValueError:  # its text would quote the URL
        return Outcome(False, None, "the URL cannot be requested")
    except (OSError, http.client.HTTPException) as error:
        return Outcome(False, None, _describe(error))
    if 200 <= status < 300:
        return Outcome(True, status, "")
    return Outcome(False, status, f"HTTP {status}")


def _describe(reason: object) -> str:
    if isinstance(reason, TimeoutError):
        return "no answer in time"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror[:MAX_REASON_CHARS]
    name = type(reason).__name__ if isinstance(reason, BaseException) else "error"
    text = " ".join(str(reason).split())[:MAX_REASON_CHARS]
    return f"{name}: {text}" if text else name
