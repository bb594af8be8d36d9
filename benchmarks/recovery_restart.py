"""A restarted control plane, timed: a fresh process that recovers every in-flight turn.

Run by the recovery benchmark as ``python -m benchmarks.recovery_restart DB EXPECT``
(``--profile`` to run it under cProfile); it prints its measurements as JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._common import LEASE_SECONDS, PROJECT_ROOT, Say, profile_ops
from benchmarks.noop_host import NoopHost
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.store import open_store


@dataclass
class Tier:
    """One history size: the store built for it and what its restarts measured."""

    events: int
    sessions: int
    closed_sessions: int
    db_bytes: int
    build_s: float
    recover_s: list[float] = field(default_factory=list)  # open store -> last recovery
    open_s: list[float] = field(default_factory=list)
    list_s: list[float] = field(default_factory=list)  # open -> sessions listed
    process_s: list[float] = field(default_factory=list)  # the whole fresh process
    recovered: list[int] = field(default_factory=list)
    median_recover_s: float = 0.0
    min_recover_s: float = 0.0  # the least disturbed restart, for a noisy machine
    median_process_s: float = 0.0
    per_session_ms: float = 0.0


def recover_child(db: Path, expect: int, profile: bool = False) -> dict[str, Any]:
    """A fresh control plane: open the store, run the controller until every in-flight
    session is recovered, stop before any new turn. Timed from opening the store.

    With ``profile`` the whole pass runs under cProfile (so its times are inflated)
    and the result carries the breakdown per recovered session.
    """
    if profile:
        out: dict[str, Any] = {}

        def once() -> None:
            out.update(recover_child(db, expect))

        out["profile"] = profile_ops(once, 1, per=expect)
        return out
    t0 = time.perf_counter()
    store = open_store(db)
    opened = time.perf_counter()
    host = NoopHost()
    recovered: list[str] = []
    lost = 0
    last = [opened]
    first: list[float | None] = [None]
    controller: Controller

    def progress(line: str) -> None:
        nonlocal lost
        if first[0] is None:
            first[0] = time.perf_counter()  # the sessions are listed; the first one starts
        if ": recovered (" in line:
            recovered.append(line)
            lost += "turn_marked_lost" in line
            last[0] = time.perf_counter()

    controller = Controller(
        store,
        ControllerConfig(lease_seconds=LEASE_SECONDS, host_loader=host.loader),
        progress=progress,
    )
    # Stopped before it starts, as a signal would: each session is recovered and then
    # runs no turn (sessions start their next turn as soon as they are recovered, and
    # this measures recovery alone; restart_bench measures the time to the next turn).
    controller.request_stop()
    summary = controller.run()
    done = last[0]
    store.close()
    listed = first[0] if first[0] is not None else done
    return {
        "open_s": opened - t0,
        # Open to the first progress line: listing every session (the takeover message
        # of the first in-flight session follows the listing at once).
        "list_s": listed - opened,
        "recover_s": done - t0,
        "sessions_recovered": len(recovered),
        "turns_marked_lost": lost,
        "turns_run": summary.turns,
    }


def run_child(db: Path, expect: int, profile: bool = False) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    extra = ["--profile"] if profile else []
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.recovery_restart", str(db), str(expect), *extra],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"recovery child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout), wall


def restart(work: Path, db: Path, tier: Tier, repeats: int, in_flight: int, say: Say) -> None:
    """``repeats`` restarts, each on a fresh copy of ``db`` with ``in_flight`` turns to
    recover, into ``tier``."""
    for r in range(repeats):
        copy = work / "restart.db"
        shutil.copyfile(db, copy)
        out, wall = run_child(copy, in_flight)
        copy.unlink()
        for suffix in ("-wal", "-shm"):
            Path(f"{copy}{suffix}").unlink(missing_ok=True)
        if out["turns_marked_lost"] != in_flight:
            raise RuntimeError(f"recovery marked {out['turns_marked_lost']} turns lost")
        tier.recover_s.append(out["recover_s"])
        tier.open_s.append(out["open_s"])
        tier.list_s.append(out["list_s"])
        tier.process_s.append(wall)
        tier.recovered.append(out["sessions_recovered"])
        say(
            f"  restart {r + 1}/{repeats}: {out['recover_s']:.3f} s to recover "
            f"{out['turns_marked_lost']} in-flight turns (opened in "
            f"{out['open_s']:.3f} s, sessions listed in {out['list_s']:.3f} s); "
            f"fresh process {wall:.2f} s"
        )
    tier.median_recover_s = statistics.median(tier.recover_s)
    tier.min_recover_s = min(tier.recover_s)
    tier.median_process_s = statistics.median(tier.process_s)
    tier.per_session_ms = tier.median_recover_s * 1000 / in_flight


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("db", type=Path, help="the store to recover (a copy: it is changed)")
    parser.add_argument("expect", type=int, help="how many in-flight turns to wait for")
    parser.add_argument("--profile", action="store_true", help="run under cProfile")
    args = parser.parse_args(argv)
    out = recover_child(args.db, args.expect, args.profile)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
