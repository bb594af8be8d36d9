"""The README's first command: the demo must run to a passed audit through both kills."""

from __future__ import annotations

import os
import subprocess
import sys


def test_demo_completes_through_host_and_control_plane_kills() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli.main", "demo"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert (
        "failed (signal: host died (SIGKILL))" in out
    )  # the host SIGKILL became a failed turn ...
    assert "resumed after failed turn" in out  # ... resolved through its recovery record
    assert "taking over the lease of dead controller" in out
    assert "killed_process" in out and "turn_marked_lost" in out
    assert "orphans of the killed turn still alive: none" in out
    assert "Terminal audit: terminal" in out
    assert "goal completed through both crashes" in out
