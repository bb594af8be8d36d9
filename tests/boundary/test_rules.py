"""Each rule family on its own: what it finds, and ordinary text it must leave alone."""

from __future__ import annotations

import hashlib

import pytest

from tests.boundary import fakes
from turnkeeper.boundary import ENTROPY_THRESHOLD, Kind, scan_text, shannon_entropy
from turnkeeper.boundary.rules import looks_like_secret_name, redact


def rules_in(text: str, name: str = "notes.txt") -> list[str]:
    return [f.rule for f in scan_text(name, text)]


@pytest.mark.parametrize(
    ("make", "rule"),
    [
        (fakes.openai_key, "openai_key"),
        (lambda: fakes.joined("sk-", fakes.random_text(48)), "openai_key"),
        (fakes.anthropic_key, "anthropic_key"),
        (fakes.github_token, "github_token"),
        (lambda: fakes.joined("github", "_pat_", fakes.random_text(30)), "github_token"),
        (lambda: fakes.joined("gh", "o_", fakes.random_text(36)), "github_token"),
        (fakes.aws_key_id, "aws_access_key"),
        (fakes.slack_token, "slack_token"),
        (fakes.pem_header, "private_key"),
        (fakes.jwt, "jwt"),
    ],
)
def test_each_credential_shape_is_found_and_never_shown_whole(make: object, rule: str) -> None:
    assert callable(make)
    secret = make()
    assert isinstance(secret, str)
    findings = scan_text("config.txt", f"value: {secret}\n")
    assert [f.rule for f in findings] == [rule]
    assert findings[0].kind is Kind.CREDENTIAL
    assert findings[0].line == 1
    assert secret not in findings[0].excerpt
    assert secret not in findings[0].model_dump_json()  # the line is never serialised
    assert findings[0].excerpt.startswith(secret[:4]) and "…" in findings[0].excerpt


def test_a_named_key_is_one_finding_not_two() -> None:
    """The OpenAI shape and the high-entropy assignment cover the same characters."""
    key = fakes.openai_key()
    findings = scan_text("settings.py", f'OPENAI_API_KEY = "{key}"\n')
    assert [(f.rule, f.excerpt) for f in findings] == [("openai_key", redact(key))]


def test_password_in_a_url() -> None:
    url = fakes.joined("postgresql://", "user:", "password", "@db.example.com/app")
    findings = scan_text("deploy.sh", f"export DATABASE_URL={url}\n")
    assert [f.rule for f in findings] == ["url_credentials"]
    assert "password" not in findings[0].excerpt
    assert findings[0].excerpt.startswith("postgresql://user:pass…")


@pytest.mark.parametrize(
    "line",
    [
        "postgresql://USER@HOST/DB",  # no password
        "postgresql://user:${PGPASSWORD}@db.example.com/app",  # where it comes from
        "https://user:...@example.com",  # a placeholder
    ],
)
def test_a_url_without_a_password_is_no_credential(line: str) -> None:
    assert rules_in(line) == []


@pytest.mark.parametrize(
    "line",
    [
        'api_token = "{value}"',
        'export DB_PASSWORD="{value}"',
        '"clientSecret": "{value}"',
        "SECRET_KEY={value}",
        "auth_token: {value}",
    ],
)
def test_high_entropy_values_of_secret_names(line: str) -> None:
    value = fakes.random_text(32)
    findings = scan_text("app.cfg", line.format(value=value) + "\n")
    assert [f.rule for f in findings] == ["high_entropy_assignment"]
    assert value not in findings[0].excerpt


@pytest.mark.parametrize(
    "line",
    [
        'key = "value"',
        'password = "changeme"',
        'token_type = "bearer"',
        'password_field = "password_confirmation_input"',  # words: no digits
        'api_key = "${OPENAI_API_KEY}"',
        'secret_ref = "projects/demo/secrets/db/versions/1"',  # low entropy
        'token_url = "https://auth.example.com/oauth2/v1/token"',
        'key = "aaaaaaaaaaaaaaaaaaaaaaaaaaaa1111"',
        'version = "3f2a9c81d07e4b56a1c3e5f7092b4d6e"',  # not a secret name
        "for key, value in pairs.items():",
        "sk-learn-is-a-long-kebab-name-with-no-digits-at-all",
    ],
)
def test_ordinary_code_is_no_credential(line: str) -> None:
    assert rules_in(line + "\n", "app.py") == []


def test_a_lock_files_sha256_digests_are_not_secrets() -> None:
    digest = hashlib.sha256(b"a package").hexdigest()
    lock = (
        '[[package]]\nname = "demo"\nversion = "1.0.0"\n'
        f'hash = "sha256:{digest}"\nchecksum = "{digest}"\n'
        f'wheels = [{{ url = "https://files.example.org/demo.whl", hash = "sha256:{digest}" }}]\n'
    )
    assert rules_in(lock, "uv.lock") == []


def test_the_entropy_threshold() -> None:
    assert shannon_entropy("") == 0.0
    assert shannon_entropy("aaaa") == 0.0
    assert shannon_entropy("abcd") == pytest.approx(2.0)
    assert shannon_entropy(fakes.random_text(40)) > ENTROPY_THRESHOLD
    assert shannon_entropy("password_confirmation") < ENTROPY_THRESHOLD + 0.5


def test_secret_like_names() -> None:
    for name in ("OPENAI_API_KEY", "dbPassword", "client-secret", "apiKey", "auth.token"):
        assert looks_like_secret_name(name), name
    for name in ("keyboard_layout", "author", "version", "checksum", "hash"):
        assert not looks_like_secret_name(name), name


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        (fakes.home_path(), "home_path"),
        ("/".join(["", "home", "bob"]), "home_path"),
        ("/".join(["", "Users", "carol", "src", "app"]), "home_path"),
        ("/".join(["", "root", ".config", "tool.toml"]), "root_path"),
        ("/".join(["", "tmp", "pytest-of-dan", "pytest-3", "work"]), "tmp_path"),
        ("\\".join(["C:", "Users", "erin", "Documents"]), "windows_user_path"),
        ("\\\\".join(["C:", "Users", "erin", "AppData"]), "windows_user_path"),  # JSON-escaped
        ("file://" + fakes.home_path(), "home_path"),
    ],
)
def test_absolute_local_paths(path: str, rule: str) -> None:
    findings = scan_text("notes.md", f"see {path} for details\n")
    assert [(f.rule, f.kind) for f in findings] == [(rule, Kind.LOCAL_PATH)]


@pytest.mark.parametrize(
    "line",
    [
        "src/home/alice/notes.txt",  # relative
        "./home/alice",
        "home/alice/notes.txt",
        "/tmp",
        "/tmp/out.txt",  # one component below /tmp
        "/home/",
        "/root",
        "https://example.com/home/alice/page",  # a URL's path, not this machine's
        "/usr/local/bin/tool",
    ],
)
def test_relative_and_system_paths_are_not_local_paths(line: str) -> None:
    assert rules_in(f"path: {line}\n") == []


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        (
            "https://bucket.s3.amazonaws.com/f.zip?X-Amz-Expires=60&X-Amz-Signature="
            + fakes.random_text(40, "0123456789abcdef"),
            "signed_url",
        ),
        (
            "https://example.blob.core.windows.net/c/f?sv=2020&sig=" + fakes.random_text(30),
            "signed_url",
        ),
        ("https://app.example.com/login?token=" + fakes.random_text(24), "signed_url"),
        (fakes.joined("http://", "192.168.1.20/admin"), "private_host_url"),
        (fakes.joined("http://", "10.0.0.5:9000"), "private_host_url"),
        (fakes.joined("redis://", "172.16.4.2:6379/0"), "private_host_url"),
    ],
    # Named, not shown: the URLs hold text drawn afresh by every process that collects
    # them, and every process must collect the same tests.
    ids=["s3_signature", "azure_sig", "login_token", "lan_192", "lan_10", "lan_172"],
)
def test_private_links(url: str, rule: str) -> None:
    findings = scan_text("README.md", f"open <{url}>\n")
    assert [(f.rule, f.kind) for f in findings] == [(rule, Kind.PRIVATE_LINK)]
    if rule == "signed_url":
        assert url.rsplit("=", 1)[1] not in findings[0].excerpt


@pytest.mark.parametrize(
    "line",
    [
        "https://example.com/docs?page=2",
        "https://github.com/owner/repo",
        "http://HOST:PORT/?token=...",  # a placeholder
        "http://172.32.0.1/",  # public
        "see localhost for details",  # not a URL
        "http://localhost.example.com/",
        # Every machine's own addresses: they say nothing of this one.
        "http://localhost:3000",
        "http://127.0.0.1:8080/",
        "http://127.1.2.3/health",
        "http://[::1]/",
        "http://0.0.0.0:8000/docs",
        "ws://user@localhost:9000/socket",  # a user name is no credential
    ],
)
def test_public_links_are_fine(line: str) -> None:
    assert rules_in(line + "\n") == []


@pytest.mark.parametrize(
    "url",
    [
        fakes.joined("http://", "admin:", fakes.random_text(16), "@localhost:5432/db"),
        fakes.joined("postgresql://", "app:", fakes.random_text(16), "@127.0.0.1/app"),
        fakes.joined("http://", "bot:", fakes.random_text(16), "@[::1]:8080/"),
    ],
    ids=["http_localhost", "postgresql_127", "http_ipv6"],  # as test_private_links's
)
def test_a_password_in_a_loopback_url_is_still_a_credential(url: str) -> None:
    findings = scan_text("README.md", f"connect to {url}\n")
    assert [(f.rule, f.kind) for f in findings] == [("url_credentials", Kind.CREDENTIAL)]


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("rollout-2026-01-01T10-00-00-abc.jsonl", "session_log_name"),
        ("codex/sessions/2026/01/01/run.jsonl", "session_log_name"),
        ("build/debug.log", "log_file"),
    ],
)
def test_session_logs_by_name(name: str, rule: str) -> None:
    findings = scan_text(name, "{}\n")
    assert [(f.rule, f.kind, f.line) for f in findings] == [(rule, Kind.TRANSCRIPT, 0)]


def test_a_transcript_by_its_lines() -> None:
    text = '{"note": "header"}\n' + fakes.transcript_lines()
    findings = scan_text("export/chat.jsonl", text)
    assert [(f.rule, f.line) for f in findings] == [("transcript_lines", 2)]


def test_a_codex_rollout_by_its_lines() -> None:
    text = '{"type": "session_meta", "payload": {"id": "x"}}\n'
    assert rules_in(text, "data/run.jsonl") == ["transcript_lines"]


@pytest.mark.parametrize(
    "text",
    [
        '{"type": "user", "name": "alice"}\n',  # no message
        '{"type": "package", "message": "hi"}\n',
        '[{"type": "user", "message": "hi"}]\n',  # not a JSON object per line
        "type: user\nmessage: hi\n",
    ],
)
def test_json_that_is_no_transcript(text: str) -> None:
    assert rules_in(text, "data/records.jsonl") == []


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        (".turnkeeper/turnkeeper.db", "state_dir"),
        ("sub/.turnkeeper/runner/token", "state_dir"),
        ("run/runner.sock", "runner_file"),
        ("runner.pid", "runner_file"),
    ],
)
def test_runtime_artifacts_by_name(name: str, rule: str) -> None:
    assert rules_in("anything\n", name)[0] == rule


def test_state_dir_files_are_one_finding_each() -> None:
    """turnkeeper's own state is private whole: its lines are not listed one by one."""
    text = fakes.openai_key() + "\n" + fakes.home_path() + "\n"
    assert rules_in(text, ".turnkeeper/runner/runner.log") == ["state_dir"]


def test_ordinary_text_is_clean() -> None:
    text = (
        "# The parser\n\nRun `pytest tests/` from the repository root.\n"
        "def parse(tokens: list[str]) -> Tree:\n    key = tokens[0]\n"
        'URL = "https://example.com/api"\n'
    )
    assert rules_in(text, "README.md") == []
