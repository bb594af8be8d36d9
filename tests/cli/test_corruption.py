"""One flipped byte in the real database file: DATA_LOSS on read and in verify, never silence."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.cli.conftest import Invoke, db_path, run_json
from turnkeeper.errors import EXIT_CODES, ErrorCode

MARKER = b"flipme-0123456789"


def _flip_marker_byte(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # move every page into the main file
    conn.close()
    data = bytearray(path.read_bytes())
    at = data.find(MARKER)
    assert at >= 0 and data.find(MARKER, at + 1) < 0, "marker must occur exactly once"
    data[at + 3] ^= 0x01  # one bit of one byte inside that event's payload
    path.write_bytes(bytes(data))


def test_flipped_event_byte_is_data_loss_on_read_and_verify(project: Path, tk: Invoke) -> None:
    run_json(tk, "goal", "add", "Corruptible", "--id", "g1")
    mon = run_json(tk, "monitor", "add", "g1", "ci", "--cadence", "60")["monitor_id"]
    # The marker lives only in the first readback event: the second readback
    # replaces it in the projection, so the flip hits the log, not the projection.
    run_json(tk, "monitor", "readback", mon, "--value", json.dumps(MARKER.decode()))
    seq = run_json(tk, "monitor", "readback", mon, "--value", '"later"')["events"]
    assert seq
    _flip_marker_byte(db_path(project))

    shown = tk("goal", "show", "g1", "--json")
    assert shown.exit_code == EXIT_CODES[ErrorCode.DATA_LOSS], shown.output
    error = json.loads(shown.stdout)["error"]
    assert error["code"] == "DATA_LOSS"
    assert error["details"]["stream_id"] == "goal:g1" and error["details"]["seq"] == 3

    verified = tk("verify", "--json")
    assert verified.exit_code == EXIT_CODES[ErrorCode.DATA_LOSS], verified.output
    report = json.loads(verified.stdout)
    assert report["ok"] is False
    hits = [m for m in report["mismatches"] if m["kind"] == "source_write"]
    assert [(m["stream_id"], m["seq"]) for m in hits] == [("goal:g1", 3)]

    # The damaged event is the authority: repair must not paper over it.
    repaired = tk("repair", "--json")
    assert repaired.exit_code == EXIT_CODES[ErrorCode.DATA_LOSS]
    assert json.loads(repaired.stdout)["unrepairable"][0]["seq"] == 3


def test_flipped_projection_byte_is_repaired_through_the_fold(project: Path, tk: Invoke) -> None:
    run_json(tk, "goal", "add", "Projection damage", "--id", "g1")
    mon = run_json(tk, "monitor", "add", "g1", "ci", "--cadence", "60")["monitor_id"]
    run_json(tk, "monitor", "readback", mon, "--value", '"first"')
    # Now the marker is the latest readback: it lives in the event AND the projection.
    run_json(tk, "monitor", "readback", mon, "--value", json.dumps(MARKER.decode()))
    path = db_path(project)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(path.read_bytes())
    first = data.find(MARKER)
    second = data.find(MARKER, first + 1)
    assert first >= 0 and second >= 0
    conn = sqlite3.connect(path)
    projection_text = conn.execute("SELECT state FROM projections").fetchone()[0]
    conn.close()
    # Flip the copy that sits inside the projection row's text.
    target = next(
        at
        for at in (first, second)
        if bytes(data[at - 40 : at]).decode(errors="replace") in projection_text
    )
    data[target + 3] ^= 0x01
    path.write_bytes(bytes(data))

    read = tk("goal", "show", "g1", "--json")
    assert read.exit_code == EXIT_CODES[ErrorCode.DATA_LOSS], read.output
    verify = tk("verify", "--json")
    assert verify.exit_code != 0
    assert any(m["stream_id"] == "goal:g1" for m in json.loads(verify.stdout)["mismatches"])
    repaired = run_json(tk, "repair")
    assert repaired["repaired"] == ["goal:g1"] and repaired["ok"] is True
    shown = run_json(tk, "goal", "show", "g1")
    assert shown["state"]["monitors"][mon]["last_readback"]["value"] == MARKER.decode()


def test_garbage_database_file_is_data_loss(project: Path, tk: Invoke) -> None:
    run_json(tk, "goal", "add", "Doomed", "--id", "g1")
    path = db_path(project)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # trash the first page after the header
    path.write_bytes(bytes(data))
    result = tk("goal", "show", "g1", "--json")
    assert result.exit_code == EXIT_CODES[ErrorCode.DATA_LOSS], result.output
    assert json.loads(result.stdout)["error"]["code"] == "DATA_LOSS"


def test_flipped_session_projection_byte_is_data_loss_in_every_listing(
    project: Path, tk: Invoke
) -> None:
    """``status`` and ``session list`` read session projections without decoding them;
    a damaged row is still DATA_LOSS naming its stream, in text and in JSON."""
    run_json(tk, "goal", "add", "Listed", "--id", "g1")
    workspace = project / MARKER.decode()  # the marker: in the created event and the state
    workspace.mkdir()
    created = run_json(
        tk, "session", "create", "g1", "--workspace", str(workspace), "--no-snapshots"
    )
    stream = f"session:{created['session_id']}"
    path = db_path(project)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (state,) = conn.execute(
        "SELECT state FROM projections WHERE stream_id = ?", (stream,)
    ).fetchone()
    conn.close()
    data = bytearray(path.read_bytes())
    hits = [at for at in range(len(data)) if data.startswith(MARKER, at)]
    around = [bytes(data[at - 30 : at + len(MARKER) + 30]).decode(errors="replace") for at in hits]
    in_state = [at for at, text in zip(hits, around, strict=True) if text in state]
    assert len(in_state) == 1, "the marker must sit once inside the session's projection row"
    data[in_state[0] + 3] ^= 0x01
    path.write_bytes(bytes(data))

    for args in (("status",), ("session", "list")):
        shown = tk(*args, "--json")
        assert shown.exit_code == EXIT_CODES[ErrorCode.DATA_LOSS], shown.output
        error = json.loads(shown.stdout)["error"]
        assert error["code"] == "DATA_LOSS" and error["reason"] == "checksum_mismatch"
        assert error["details"]["stream_id"] == stream
        assert error["details"]["record"] == "projection"
        text = tk(*args)
        assert text.exit_code == EXIT_CODES[ErrorCode.DATA_LOSS], text.output
        assert "DATA_LOSS" in text.stderr and stream in text.stderr
    # The goal's own stream is intact: reading it is not refused.
    assert run_json(tk, "goal", "show", "g1")["state"]["goal"]["id"] == "g1"
