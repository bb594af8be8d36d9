"""``turnkeeper serve`` and ``turnkeeper share`` as a user runs them: real processes,
a real port, SIGTERM to stop (only the server this test started, by its pid).

A first start prints a fresh admin token once, with a login URL; a restart from a
token file retires that token; a share made from the command line reaches its
session over HTTP until it is revoked; ``--json-logs`` logs JSON lines that never
carry a token; ``--help`` of the command line does not import FastAPI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.api.conftest import ApiProject

CLI = [sys.executable, "-m", "turnkeeper.cli.main"]


def _env(project: ApiProject) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    env["TURNKEEPER_DIR"] = str(project.root)
    return env


def tk(project: ApiProject, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*CLI, *args], env=_env(project), capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@contextmanager
def serving(project: ApiProject, *args: str) -> Iterator[tuple[str, list[str], Path]]:
    """``turnkeeper serve --port 0 ARGS``: its base URL, its first lines, its stderr file."""
    err = project.root.parent / f"serve-{time.monotonic_ns()}.err"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            [*CLI, "serve", "--port", "0", *args],
            env=_env(project),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline()]
        assert lines[0].startswith("serving "), lines[0] + err.read_text()
        lines.append(proc.stdout.readline())
        if "shown once" in lines[-1]:
            lines.append(proc.stdout.readline())
        base = lines[0].split(" on ")[-1].strip()
        assert base.startswith("http://127.0.0.1:")
        yield base, lines, err
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            # A clean shutdown; uvicorn then ends by the signal it caught, re-raised.
            assert proc.wait(timeout=20) in (0, -signal.SIGTERM), err.read_text()
            assert "Application shutdown complete" in err.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _get(base: str, path: str, token: str) -> httpx.Response:
    return httpx.get(base + path, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def test_serve_share_and_restart(api_project: ApiProject) -> None:
    project = api_project
    sid = project.session_id
    with serving(project, "--json-logs") as (base, lines, err):
        token = lines[1].split(": ", 1)[1].strip()
        assert lines[2].strip() == f"login: {base}/?token={token}"
        assert _get(base, "/v1/whoami", token).json() == {"kind": "admin", "share": None}
        made = json.loads(tk(project, "share", "create", sid, "--read-only", "--json").stdout)
        share = made["token"]
        assert (made["session_id"], made["mode"]) == (sid, "read")
        assert _get(base, f"/v1/sessions/{sid}", share).status_code == 200
        assert _get(base, "/v1/status", share).status_code == 403
        listed = json.loads(tk(project, "share", "list", "--json").stdout)
        assert [s["share_id"] for s in listed] == [made["share_id"]]
        assert "token" not in listed[0]
        tk(project, "share", "revoke", made["share_id"])
        assert _get(base, f"/v1/sessions/{sid}", share).status_code == 401
    logged = [json.loads(line) for line in err.read_text().splitlines() if line.startswith("{")]
    requests = [line for line in logged if line.get("path")]
    assert {r["path"] for r in requests} >= {"/v1/whoami", f"/v1/sessions/{sid}"}
    assert {r["caller"] for r in requests} >= {"admin", f"share:{made['share_id']}"}
    assert token not in err.read_text() and share not in err.read_text()

    # A restart from a token file: the printed token is retired, the file's works.
    token_file = project.root.parent / "token"
    token_file.write_text("tka_from-a-file-0123456789abcdef\n")
    with serving(project, "--token-file", str(token_file)) as (base, lines, _):
        assert "shown once" not in "".join(lines)
        assert _get(base, "/v1/whoami", token).status_code == 401
        assert _get(base, "/v1/whoami", "tka_from-a-file-0123456789abcdef").status_code == 200
    # Tokens and shares are project state: verify folds the access stream too.
    tk(project, "verify")


def test_share_needs_one_mode_and_help_needs_no_fastapi(api_project: ApiProject) -> None:
    refused = subprocess.run(
        [*CLI, "share", "create", api_project.session_id, "--json"],
        env=_env(api_project),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert json.loads(refused.stdout)["error"]["reason"] == "share_mode_required"
    probe = subprocess.run(
        [sys.executable, "-X", "importtime", *CLI[1:], "--help"],
        env=_env(api_project),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in probe.stderr.splitlines()}
    assert "typer" in imported
    assert not {m for m in imported if m.split(".")[0] in {"fastapi", "uvicorn", "starlette"}}


def test_share_lines_are_whole_on_an_80_column_terminal(api_project: ApiProject) -> None:
    """What `share create` and `share list` print is copied and grepped: one line each
    share, ids never broken over lines, at a pipe's default width."""
    sid = api_project.session_id
    narrow = {**_env(api_project), "COLUMNS": "80"}
    made = subprocess.run(
        [*CLI, "share", "create", sid, "--read-only"],
        env=narrow, capture_output=True, text=True, timeout=120, check=True,
    ).stdout.splitlines()  # fmt: skip
    (share,) = json.loads(tk(api_project, "share", "list", "--json").stdout)
    assert made[0] == f"shared session {sid} (read) as {share['share_id']}; the token, shown once:"
    assert len(made) == 2 and made[1].startswith("tks_"), made
    listed = subprocess.run(
        [*CLI, "share", "list"], env=narrow, capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    assert len(listed) == 1, listed
    assert listed[0].startswith(f"{share['share_id']}  {sid}  read  ") and listed[0].endswith(
        "active"
    ), listed


def test_answers_are_not_held_back_for_the_clients_ack(api_project: ApiProject) -> None:
    # uvicorn writes an answer's head and body apart. On a socket that had not said it
    # is TCP, asyncio left Nagle's algorithm on, so the body waited for the client's
    # delayed ACK: every answer took ~40 ms more (whoami: 45 ms, 3 ms without).
    with serving(api_project) as (base, lines, _):
        token = lines[1].split(": ", 1)[1].strip()
        headers = {"Authorization": f"Bearer {token}"}
        took = []
        with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
            for _ in range(15):  # one connection, kept alive, as a client's
                began = time.monotonic()
                assert client.get("/v1/whoami").status_code == 200
                took.append(time.monotonic() - began)
    took.sort()
    assert took[len(took) // 2] < 0.025, took
