"""Secrets, paths and transcripts made up at run time.

Nothing here is spelled out literally, so this test suite's own source passes
``turnkeeper scan`` (and a host's secret scanning) while the tests see the real shapes.
"""

from __future__ import annotations

import json
import secrets
import string

ALNUM = string.ascii_letters + string.digits
UPPER = string.ascii_uppercase + string.digits


def random_text(length: int, alphabet: str = ALNUM) -> str:
    text = "".join(secrets.choice(alphabet) for _ in range(length))
    # A key has letters and digits both; a random draw could (rarely) lack one.
    return text[:-2] + "a7"


def joined(*parts: str) -> str:
    """``parts`` concatenated: a shape assembled where the source never holds it whole."""
    return "".join(parts)


def openai_key() -> str:
    return joined("sk-", "proj-", random_text(40))


def anthropic_key() -> str:
    return joined("sk-", "ant-", "api03-", random_text(40))


def github_token() -> str:
    return joined("gh", "p_", random_text(36))


def aws_key_id() -> str:
    return joined("AK", "IA", random_text(16, UPPER)[:-2] + "Q7")


def slack_token() -> str:
    return joined("xo", "xb-", random_text(12, string.digits), "-", random_text(24))


def pem_header() -> str:
    return joined("-----BEGIN ", "RSA PRIVATE", " KEY-----")


def jwt() -> str:
    return ".".join(joined("ey", "J", random_text(20)) for _ in range(2)) + "." + random_text(30)


def home_path(user: str = "alice", rest: str = "notes.txt") -> str:
    return "/".join(["", "home", user, rest])


def transcript_lines() -> str:
    lines = [
        {"type": "user", "message": {"role": "user", "content": "fix the parser"}},
        {"type": "assistant", "message": {"role": "assistant", "content": "done"}},
    ]
    return "".join(json.dumps(line) + "\n" for line in lines)
