"""What must never be published, as patterns: each rule names a kind and a shape.

Rules look at three things: a line of text (credentials, local paths, private links),
a file's name (agent session logs, ``*.log``, turnkeeper's state directory, runner
files) and a file's first bytes or lines (SQLite files, transcripts of JSON lines).
Every rule is pure: text in, findings out, so the scanner, a handoff packet writer or
a test can call them on any text.

A finding never carries the secret it found in what it shows: its ``excerpt`` keeps the
first four characters of the secret and ``…``.
"""

from __future__ import annotations

import json
import math
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePosixPath

from pydantic import BaseModel, Field


class Kind(StrEnum):
    CREDENTIAL = "credential"
    LOCAL_PATH = "local_path"
    TRANSCRIPT = "transcript"
    PRIVATE_LINK = "private_link"
    RUNTIME_ARTIFACT = "runtime_artifact"


class Finding(BaseModel):
    """One thing that must not be published. ``line`` is 1-based; 0 means the whole
    file (found by its name or its header)."""

    path: str
    line: int
    kind: Kind
    rule: str
    what: str
    excerpt: str
    # The whole line (or, for a whole-file finding, the path): what an allow-list
    # entry's ``match`` is compared with. Never printed, never in JSON.
    context: str = Field(default="", exclude=True, repr=False)


# --- shapes of one line ----------------------------------------------------------------

# Shannon entropy, in bits per character, above which a value assigned to a name that
# looks like a secret is taken for one. Random base62 runs at ~5.2-5.9, hex digests at
# ~3.7-4.0, English words and identifiers mostly below 3.5.
ENTROPY_THRESHOLD = 3.5
ENTROPY_MIN_LENGTH = 20
EXCERPT_MAX = 72

# Words that make a name look like it holds a secret (``OPENAI_API_KEY``, ``dbPassword``).
_SECRET_WORDS = frozenset(
    {"key", "token", "secret", "password", "passwd", "pwd", "passphrase", "credential"}
)
_SECRET_SUFFIXES = ("key", "token", "secret", "password", "passwd", "credentials")
# Values that name where a secret comes from, or are digests, not secrets themselves.
_NOT_A_VALUE = re.compile(r"^(?:[$%<{]|sha\d+[:-]|md5[:-])|://", re.IGNORECASE)


@dataclass(frozen=True)
class LineRule:
    """``pattern`` finds the shape; its group ``secret`` (else the whole match) is the
    part never shown whole; ``check`` may refuse a match the pattern alone cannot."""

    name: str
    kind: Kind
    what: str
    pattern: re.Pattern[str]
    check: Callable[[re.Match[str]], bool] | None = None
    # Text holding none of these cannot match: the rule is skipped without running its
    # pattern (a plain substring test is ~100 times cheaper than the regex).
    needles: tuple[str, ...] = ()


def shannon_entropy(text: str) -> float:
    """Bits per character of ``text``'s own character distribution."""
    if not text:
        return 0.0
    counts = Counter(text)
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def _has_letters_and_digits(text: str) -> bool:
    return any(c.isdigit() for c in text) and any(c.isalpha() for c in text)


def _token_body(match: re.Match[str]) -> bool:
    # A real key mixes letters and digits; ``sk-some-long-kebab-name`` does not.
    return _has_letters_and_digits(match.group("secret"))


def _name_words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w]


def looks_like_secret_name(name: str) -> bool:
    return any(w in _SECRET_WORDS or w.endswith(_SECRET_SUFFIXES) for w in _name_words(name))


def _high_entropy_assignment(match: re.Match[str]) -> bool:
    value = match.group("secret")
    return (
        looks_like_secret_name(match.group("name"))
        and not _NOT_A_VALUE.search(value)
        # ``projects/demo/secrets/db/versions/1`` names a secret; a key's characters
        # mix letters and digits (a base64 one may hold a ``/``).
        and any(len(part) >= 8 and _has_letters_and_digits(part) for part in value.split("/"))
        and shannon_entropy(value) >= ENTROPY_THRESHOLD
    )


def _real_value(match: re.Match[str]) -> bool:
    # ``user:${PGPASSWORD}@``, ``?token=...``: where a value goes, not a value.
    value = match.group("secret")
    return not _NOT_A_VALUE.search(value) and "..." not in value and "…" not in value


def _real_signature(match: re.Match[str]) -> bool:
    return _real_value(match) and len(match.group("secret")) >= 8


# Not preceded by a name character, a dot or a slash: ``src/home/x`` and ``./home/x``
# are relative paths; a ``file://`` URL's path is still absolute.
_PATH_START = r"(?:(?<=file://)|(?<![\w.~/\\-]))"
_PATH_REST = r"[^\s\"'`<>()\[\]{}|,;*?]*"
# A private network's hosts: a URL naming one points into a network a reader of the
# repository has no business knowing. The loopback names (``localhost``, 127.x,
# ``[::1]``) and ``0.0.0.0`` are not here: every machine has them, so a README's
# ``http://localhost:3000`` tells nothing of this one, and a password in such a URL is
# still found by ``url_credentials``.
_PRIVATE_HOST = (
    r"(?:10(?:\.\d{1,3}){3}|192\.168(?:\.\d{1,3}){2}"
    r"|172\.(?:1[6-9]|2\d|3[01])(?:\.\d{1,3}){2})"
)

LINE_RULES: tuple[LineRule, ...] = (
    LineRule(
        "anthropic_key",
        Kind.CREDENTIAL,
        "Anthropic API key",
        re.compile(r"(?<![\w-])(?P<secret>sk-ant-[A-Za-z0-9_-]{20,})"),
        _token_body,
        needles=("sk-ant-",),
    ),
    LineRule(
        "openai_key",
        Kind.CREDENTIAL,
        "OpenAI API key",
        re.compile(
            r"(?<![\w-])(?P<secret>sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,})"
        ),
        _token_body,
        needles=("sk-",),
    ),
    LineRule(
        "github_token",
        Kind.CREDENTIAL,
        "GitHub token",
        re.compile(r"(?<!\w)(?P<secret>(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{22,}))"),
        needles=("gh", "github_pat_"),
    ),
    LineRule(
        "aws_access_key",
        Kind.CREDENTIAL,
        "AWS access key id",
        re.compile(r"(?<![A-Z0-9])(?P<secret>(?:AKIA|ASIA)[0-9A-Z]{16})(?![A-Z0-9])"),
        needles=("AKIA", "ASIA"),
    ),
    LineRule(
        "slack_token",
        Kind.CREDENTIAL,
        "Slack token",
        re.compile(r"(?<![\w-])(?P<secret>xox[baprs]-[A-Za-z0-9-]{10,})"),
        _token_body,
        needles=("xox",),
    ),
    LineRule(
        "private_key",
        Kind.CREDENTIAL,
        "private key",
        re.compile(r"(?P<secret>-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----)"),
        needles=("-----BEGIN ",),
    ),
    LineRule(
        "jwt",
        Kind.CREDENTIAL,
        "JSON web token",
        re.compile(r"(?<![\w-])(?P<secret>eyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]{8,})"),
        needles=("eyJ",),
    ),
    LineRule(
        "url_credentials",
        Kind.CREDENTIAL,
        "password in a URL",
        re.compile(r"\b[a-zA-Z][\w+.-]*://[^\s/:@\"'`]+:(?P<secret>[^\s/@\"'`]+)@"),
        _real_value,
        needles=("://",),
    ),
    LineRule(
        "high_entropy_assignment",
        Kind.CREDENTIAL,
        "high-entropy value assigned to a secret-like name",
        re.compile(
            r"(?<![\w.-])(?P<name>[A-Za-z_][\w.-]*)[\"']?[ \t]*(?::=|=|:)[ \t]*(?P<q>[\"']?)"
            rf"(?P<secret>[^\s\"'`,;()\[\]{{}}]{{{ENTROPY_MIN_LENGTH},}})(?P=q)"
        ),
        _high_entropy_assignment,
        needles=("=", ":"),
    ),
    LineRule(
        "home_path",
        Kind.LOCAL_PATH,
        "path in a home directory",
        re.compile(_PATH_START + r"/(?:home|Users)/[A-Za-z0-9._-]+(?:/" + _PATH_REST + r")?"),
        needles=("/home/", "/Users/"),
    ),
    LineRule(
        "root_path",
        Kind.LOCAL_PATH,
        "path in root's home directory",
        re.compile(_PATH_START + r"/root/[\w.-]" + _PATH_REST),
        needles=("/root/",),
    ),
    LineRule(
        "tmp_path",
        Kind.LOCAL_PATH,
        "path inside /tmp",
        # More than one component below /tmp, ``/tmp/<dir>/<file>`` (a scratch file's own dir,
        # a test run's) is a machine's; ``/tmp/out.txt`` in an example is not.
        re.compile(_PATH_START + r"/tmp/[\w.-]+/[\w.-]" + _PATH_REST),
        needles=("/tmp/",),
    ),
    LineRule(
        "windows_user_path",
        Kind.LOCAL_PATH,
        "path in a Windows user directory",
        re.compile(r"(?<![\w])[A-Za-z]:\\{1,2}Users\\{1,2}[^\\\s\"'`<>|]+"),
        needles=(":\\",),
    ),
    LineRule(
        "signed_url",
        Kind.PRIVATE_LINK,
        "signed or token-bearing URL",
        re.compile(
            r"\bhttps?://[^\s\"'`<>]*?[?&](?:X-Amz-Signature|X-Amz-Credential|"
            r"X-Goog-Signature|sig|signature|token|access_token)=(?P<secret>[^&\s\"'`<>]+)",
            re.IGNORECASE,
        ),
        _real_signature,
        needles=("://",),
    ),
    LineRule(
        "private_host_url",
        Kind.PRIVATE_LINK,
        "URL of a private network's host",
        re.compile(r"\b[a-zA-Z][\w+.-]*://(?:[^\s/@\"'`]+@)?" + _PRIVATE_HOST + r"(?![\w.-])"),
        needles=("://",),
    ),
)
_RULES_BY_NAME = {rule.name: rule for rule in LINE_RULES}
_NEWLINE = re.compile("\n")


def redact(secret: str) -> str:
    """The first four characters of a secret, then ``…``: enough to find it, not to use it."""
    return secret[:4] + "…"


def _excerpt(match: re.Match[str], rule: LineRule) -> str:
    has_secret = "secret" in rule.pattern.groupindex
    if has_secret and match.group("secret") is not None:
        start, end = match.span("secret")
        text = match.string[match.start() : start] + redact(match.group("secret"))
        text += match.string[end : match.end()]
    else:
        text = match.group()
    return text if len(text) <= EXCERPT_MAX else text[: EXCERPT_MAX - 1] + "…"


def scan_lines(path: str, text: str) -> list[Finding]:
    """Every shape of :data:`LINE_RULES` in ``text``, in line order. No pattern crosses
    a newline, so each runs once over the whole text (a line-by-line loop of Python
    costs ten times as much on a large file). A generic high-entropy match is dropped
    where another shape already covers the same characters."""
    starts = [0, *(m.end() for m in _NEWLINE.finditer(text))]
    found: list[tuple[int, int, Finding]] = []
    taken: list[tuple[int, int]] = []
    for order, rule in enumerate(LINE_RULES):
        if rule.needles and not any(needle in text for needle in rule.needles):
            continue
        for match in rule.pattern.finditer(text):
            if rule.check is not None and not rule.check(match):
                continue
            span = match.span("secret") if "secret" in rule.pattern.groupindex else match.span()
            if rule.name == "high_entropy_assignment" and any(
                span[0] < end and start < span[1] for start, end in taken
            ):
                continue
            taken.append(span)
            index = bisect_right(starts, match.start()) - 1
            line_end = starts[index + 1] - 1 if index + 1 < len(starts) else len(text)
            finding = Finding(
                path=path,
                line=index + 1,
                kind=rule.kind,
                rule=rule.name,
                what=rule.what,
                excerpt=_excerpt(match, rule),
                context=text[starts[index] : line_end].rstrip("\r"),
            )
            found.append((index, order, finding))
    found.sort(key=lambda item: (item[0], item[1]))
    return [finding for _, _, finding in found]


def scan_line(path: str, number: int, line: str) -> list[Finding]:
    """:func:`scan_lines` on one line, numbered ``number``."""
    return [f.model_copy(update={"line": number}) for f in scan_lines(path, line)]


def scan_value(text: str) -> list[Finding]:
    """:func:`scan_lines` on one string that is no file's content (a value of a JSON
    document, say): only the line rules, no file name; each finding's ``path`` is empty."""
    return scan_lines("", text)


def rule_named(name: str) -> LineRule:
    return _RULES_BY_NAME[name]


# --- shapes of a whole file ------------------------------------------------------------

STATE_DIR_NAME = ".turnkeeper"
# The runner's files (turnkeeper/runner/paths.py): a socket, its pid and lock files.
_RUNNER_FILE_NAMES = frozenset({"runner.sock", "runner.pid", "runner.lock"})
_SQLITE_MAGIC = b"SQLite format 3\x00"
_SQLITE_WAL_MAGIC = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")
_SQLITE_JOURNAL_MAGIC = b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7"
# Lines a transcript is made of: Claude's session files (``"type": "user"`` with a
# ``"message"``) and Codex rollouts (``"type": "response_item"`` with a ``"payload"``).
_TRANSCRIPT_TYPES = {"user": "message", "assistant": "message"}
_ROLLOUT_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context"})
TRANSCRIPT_PROBE_LINES = 50


def _whole_file(path: str, kind: Kind, rule: str, what: str) -> Finding:
    name = PurePosixPath(path).name or path
    return Finding(path=path, line=0, kind=kind, rule=rule, what=what, excerpt=name, context=path)


def scan_name(path: str) -> list[Finding]:
    """What a file is by its (repository-relative, POSIX) name alone."""
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else path
    if STATE_DIR_NAME in parts[:-1]:
        # turnkeeper's own state is private whole: what else its files are adds nothing.
        return [_whole_file(path, Kind.RUNTIME_ARTIFACT, "state_dir", "inside .turnkeeper/")]
    found: list[Finding] = []
    if name in _RUNNER_FILE_NAMES or name.endswith(".sock"):
        found.append(_whole_file(path, Kind.RUNTIME_ARTIFACT, "runner_file", "runner file"))
    if name.endswith(".jsonl") and (name.startswith("rollout-") or "sessions" in parts[:-1]):
        found.append(_whole_file(path, Kind.TRANSCRIPT, "session_log_name", "agent session log"))
    elif name.endswith(".log"):
        found.append(_whole_file(path, Kind.TRANSCRIPT, "log_file", "log file"))
    return found


def scan_header(path: str, head: bytes) -> list[Finding]:
    """What a file is by its first bytes: an SQLite database, WAL or journal."""
    if head.startswith(_SQLITE_MAGIC):
        return [_whole_file(path, Kind.RUNTIME_ARTIFACT, "sqlite_database", "SQLite database")]
    if head[:4] in _SQLITE_WAL_MAGIC:
        return [_whole_file(path, Kind.RUNTIME_ARTIFACT, "sqlite_wal", "SQLite write-ahead log")]
    if head.startswith(_SQLITE_JOURNAL_MAGIC):
        return [_whole_file(path, Kind.RUNTIME_ARTIFACT, "sqlite_journal", "SQLite journal")]
    return []


def _transcript_line(line: str) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False
    if not isinstance(record, dict):
        return False
    kind = record.get("type")
    if not isinstance(kind, str):
        return False
    if kind in _TRANSCRIPT_TYPES:
        return _TRANSCRIPT_TYPES[kind] in record
    return kind in _ROLLOUT_TYPES and "payload" in record


def transcript_line_number(lines: list[str]) -> int | None:
    """The first line (1-based) among the first :data:`TRANSCRIPT_PROBE_LINES` that is a
    transcript record, when the text is JSON lines; else None."""
    for number, line in enumerate(lines[:TRANSCRIPT_PROBE_LINES], start=1):
        stripped = line.strip()
        if stripped.startswith("{") and _transcript_line(stripped):
            return number
    return None
