"""Storage benchmark: bytes stored per turn, early versus late in a long session.

Run ``python -m benchmarks.storage_bench`` (``--quick``: 1,000 turns; ``--smoke``
for the tests; ``--json`` for machine-readable output). Everything runs on the
project's own disk (a temp dir under ``.cache/``), never tmpfs.

* **turnkeeper**: one session works on a todo that never finishes for 10,000
  turns through the controller's loop with a no-op host that answers every turn
  with the same reply. At every tenth of the run (and of the LangGraph run's
  length) the store is measured: the bytes SQL holds — every event payload plus
  every projection row's state — and the database file's size after the WAL is
  checkpointed into it (``PRAGMA wal_checkpoint(TRUNCATE)``).
* **LangGraph**: the same conversation — each turn's user message is the
  instructions turnkeeper's turn carried, the reply the same text — as a
  one-node graph whose state accumulates the messages (``operator.add``),
  checkpointed by ``SqliteSaver`` with ``durability="sync"``: the bytes of the
  checkpoint and writes tables and the file size, at the same marks. Its cost per
  turn grows with the conversation, so it runs for at most 1,000 turns (a
  10,000-turn run would write tens of GB); the growth it shows is fitted with a
  line and the fit extrapolated to the full length, marked as such.
* With ``--delta`` (on in the full run) also LangGraph's beta ``DeltaChannel``,
  which stores deltas and a full snapshot of the channel every 100 updates.

Reported: bytes per turn in the first and last tenth of each run, their ratio
(1.0 = constant cost per turn), and turnkeeper over LangGraph's own window.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sqlite3
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import (
    Say,
    TurnLoop,
    add_columns,
    announce_machine,
    count_events,
    git_workspace,
    load_average,
    print_results,
    progress_printer,
    render_machine,
    render_targets,
    run_in_directory,
)
from benchmarks.noop_host import NoopHost
from benchmarks.peers import LangGraphConversation, missing_peers
from turnkeeper.hosts import TurnRequest
from turnkeeper.store import open_store

# An agent's reply of realistic length: the same text on both sides.
REPLY = (
    "Read the failing test and the parser it exercises; the tokenizer dropped a trailing "
    "escape. Patched it, added a regression test, ran the suite: 412 passed. Next: the "
    "error message for unterminated strings still points one column too far right."
)
TARGET_LATE_VS_EARLY = 1.1  # turnkeeper: late turns cost at most this much more


@dataclass
class Settings:
    turns: int
    langgraph_turns: int
    delta: bool
    marks: int = 10  # measurements per run: every tenth


FULL = Settings(turns=10_000, langgraph_turns=1_000, delta=True)
QUICK = Settings(turns=1_000, langgraph_turns=1_000, delta=False)
SMOKE = Settings(turns=30, langgraph_turns=15, delta=False, marks=3)


@dataclass
class Mark:
    turn: int
    sql_bytes: int
    file_bytes: int
    seconds: float
    # What turnkeeper keeps outside SQLite, in the session's workspace: its snapshots'
    # git objects and refs (``.git``) and artifact copies (``.turnkeeper``). Apparent
    # file sizes, and the blocks they take on disk (a loose git object is one file).
    workspace_bytes: int = 0
    workspace_disk_bytes: int = 0


@dataclass
class Window:
    first_turn: int
    last_turn: int
    sql_bytes_per_turn: float
    file_bytes_per_turn: float
    workspace_bytes_per_turn: float = 0.0
    workspace_disk_bytes_per_turn: float = 0.0


@dataclass
class Growth:
    """One system's run: its marks, and bytes per turn in its first and last windows."""

    name: str
    turns: int
    marks: list[Mark] = field(default_factory=list)
    early: Window | None = None
    late: Window | None = None
    sql_late_vs_early: float = 0.0
    file_late_vs_early: float = 0.0
    rows_per_turn: float = 0.0
    seconds: float = 0.0


@dataclass
class Extrapolation:
    """LangGraph's SQL bytes per turn fitted as a + b * turn, taken to ``turn``."""

    turn: int
    bytes_per_turn_at_turn: float
    total_bytes: float
    slope_bytes_per_turn_per_turn: float


@dataclass
class Results:
    machine: dict[str, Any]
    settings: dict[str, Any]
    turnkeeper: Growth
    # turnkeeper over LangGraph's own (shorter) run: its first and last windows.
    turnkeeper_same_window: Growth | None = None
    langgraph: Growth | None = None
    langgraph_delta: Growth | None = None
    langgraph_extrapolated: Extrapolation | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)


# -- measuring -------------------------------------------------------------------------


def turnkeeper_usage(db: Path) -> tuple[int, int]:
    """(SQL bytes: event payloads + projection states, file bytes after a checkpoint)."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        (payloads,) = conn.execute(
            "SELECT COALESCE(SUM(LENGTH(payload)), 0) FROM events"
        ).fetchone()
        (states,) = conn.execute(
            "SELECT COALESCE(SUM(LENGTH(state)), 0) FROM projections"
        ).fetchone()
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    finally:
        conn.close()
    return int(payloads) + int(states), int(pages) * int(size)


def workspace_usage(workspace: Path) -> tuple[int, int]:
    """(apparent bytes, allocated bytes) of the workspace's ``.git`` and ``.turnkeeper``."""
    apparent = allocated = 0
    for top in (workspace / ".git", workspace / ".turnkeeper"):
        for root, _dirs, files in os.walk(top):
            for name in files:
                try:
                    st = os.lstat(os.path.join(root, name))
                except FileNotFoundError:
                    continue
                apparent += st.st_size
                allocated += st.st_blocks * 512
    return apparent, allocated


def mark_points(turns: int, marks: int) -> list[int]:
    return sorted({round(turns * k / marks) for k in range(marks + 1)})


def window(marks: list[Mark], first: int, last: int) -> Window:
    """Bytes per turn between the marks at turn ``first`` and turn ``last``."""
    by_turn = {m.turn: m for m in marks}
    a, b = by_turn[first], by_turn[last]
    n = last - first
    return Window(
        first_turn=first + 1,
        last_turn=last,
        sql_bytes_per_turn=(b.sql_bytes - a.sql_bytes) / n,
        file_bytes_per_turn=(b.file_bytes - a.file_bytes) / n,
        workspace_bytes_per_turn=(b.workspace_bytes - a.workspace_bytes) / n,
        workspace_disk_bytes_per_turn=(b.workspace_disk_bytes - a.workspace_disk_bytes) / n,
    )


def summarize(growth: Growth, points: list[int]) -> None:
    growth.early = window(growth.marks, points[0], points[1])
    growth.late = window(growth.marks, points[-2], points[-1])
    growth.sql_late_vs_early = growth.late.sql_bytes_per_turn / growth.early.sql_bytes_per_turn
    if growth.early.file_bytes_per_turn > 0:
        growth.file_late_vs_early = (
            growth.late.file_bytes_per_turn / growth.early.file_bytes_per_turn
        )


def fit_line(marks: list[Mark]) -> tuple[float, float]:
    """Least squares of SQL bytes per turn over each window's middle turn: (a, b)."""
    xs, ys = [], []
    for m0, m1 in itertools.pairwise(marks):
        xs.append((m0.turn + m1.turn) / 2)
        ys.append((m1.sql_bytes - m0.sql_bytes) / (m1.turn - m0.turn))
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - b * mx, b


# -- the runs --------------------------------------------------------------------------


class RecordingHost(NoopHost):
    """The no-op host that also keeps the first ``keep`` turns' instructions."""

    def __init__(self, reply: str, keep: int) -> None:
        super().__init__(reply=reply)
        self.keep = keep
        self.instructions: list[str] = []

    def start(self, request: TurnRequest) -> Any:
        if len(self.instructions) < self.keep:
            self.instructions.append(request.instructions)
        return super().start(request)


def run_turnkeeper(work: Path, settings: Settings, say: Say) -> tuple[Growth, Growth, list[str]]:
    db = work / "turnkeeper.db"
    store = open_store(db)
    workspace = git_workspace(work / "workspace")
    host = RecordingHost(REPLY, keep=settings.langgraph_turns)
    loop = TurnLoop(store, workspace, "storage", host=host)
    own = mark_points(settings.turns, settings.marks)
    theirs = mark_points(min(settings.langgraph_turns, settings.turns), settings.marks)
    points = sorted(set(own) | set(theirs))
    growth = Growth(name="turnkeeper", turns=settings.turns)
    rows0 = count_events(db)
    t0 = time.perf_counter()
    for point in points:
        while loop.turns < point:
            loop.step()
        sql_bytes, file_bytes = turnkeeper_usage(db)
        ws_bytes, ws_disk = workspace_usage(workspace)
        growth.marks.append(
            Mark(point, sql_bytes, file_bytes, time.perf_counter() - t0, ws_bytes, ws_disk)
        )
        if point:
            rate = point / (time.perf_counter() - t0)
            say(
                f"  turnkeeper: {point:,}/{settings.turns:,} turns ({rate:,.0f} turns/s), "
                f"{sql_bytes / 2**20:,.2f} MiB in SQL, file {file_bytes / 2**20:,.2f} MiB, "
                f"workspace .git+.turnkeeper {ws_disk / 2**20:,.2f} MiB on disk"
            )
    growth.seconds = time.perf_counter() - t0
    growth.rows_per_turn = (count_events(db) - rows0) / settings.turns
    loop.release()
    store.close()
    full = Growth(
        name="turnkeeper",
        turns=settings.turns,
        marks=[m for m in growth.marks if m.turn in own],
        rows_per_turn=growth.rows_per_turn,
        seconds=growth.seconds,
    )
    summarize(full, own)
    same = Growth(
        name="turnkeeper (LangGraph's window)",
        turns=theirs[-1],
        marks=[m for m in growth.marks if m.turn in theirs],
        rows_per_turn=growth.rows_per_turn,
    )
    summarize(same, theirs)
    return full, same, host.instructions


def run_langgraph(
    work: Path, turns: int, marks: int, messages: list[str], delta: bool, say: Say
) -> Growth:
    name = "LangGraph DeltaChannel (beta)" if delta else "LangGraph (messages, operator.add)"
    path = work / ("langgraph-delta.sqlite" if delta else "langgraph.sqlite")
    graph = LangGraphConversation(path, REPLY, delta=delta)
    points = mark_points(turns, marks)
    growth = Growth(name=name, turns=turns)
    t0 = time.perf_counter()
    done = 0
    for point in points:
        while done < point:
            graph.turn(messages[done % len(messages)])
            done += 1
        sql_bytes, file_bytes = graph.sql_bytes(), graph.file_bytes()
        growth.marks.append(Mark(point, sql_bytes, file_bytes, time.perf_counter() - t0))
        if point:
            say(
                f"  {name}: {point:,}/{turns:,} turns, {sql_bytes / 2**20:,.1f} MiB in SQL, "
                f"file {file_bytes / 2**20:,.1f} MiB"
            )
    growth.seconds = time.perf_counter() - t0
    growth.rows_per_turn = graph.rows() / turns
    graph.close()
    summarize(growth, points)
    path.unlink(missing_ok=True)  # up to a GB: do not keep it around
    return growth


def run(settings: Settings, say: Say, directory: Path | None = None) -> Results:
    def body(work: Path) -> Results:
        info = announce_machine(work, say)
        say(f"turnkeeper: one session, {settings.turns:,} turns ...")
        tk, same, messages = run_turnkeeper(work, settings, say)
        res = Results(
            machine=info, settings=asdict(settings), turnkeeper=tk, turnkeeper_same_window=same
        )
        missing = missing_peers()
        if "langgraph" in missing:
            res.skipped["langgraph"] = missing["langgraph"]
            say(f"[yellow]skipping LangGraph: {missing['langgraph']}[/yellow]")
        else:
            lg_turns = min(settings.langgraph_turns, settings.turns)
            say(f"LangGraph: the same conversation, {lg_turns:,} turns ...")
            res.langgraph = run_langgraph(work, lg_turns, settings.marks, messages, False, say)
            a, b = fit_line(res.langgraph.marks)
            n = settings.turns
            res.langgraph_extrapolated = Extrapolation(
                turn=n,
                bytes_per_turn_at_turn=a + b * n,
                total_bytes=a * n + b * n * (n + 1) / 2,
                slope_bytes_per_turn_per_turn=b,
            )
            if settings.delta:
                say(f"LangGraph DeltaChannel (beta): {lg_turns:,} turns ...")
                res.langgraph_delta = run_langgraph(
                    work, lg_turns, settings.marks, messages, True, say
                )
        res.machine["loadavg_end"] = load_average()
        res.targets["turnkeeper_late_vs_early"] = {
            "target": f"<= {TARGET_LATE_VS_EARLY}x (constant bytes per turn)",
            "value": tk.sql_late_vs_early,
            "met": tk.sql_late_vs_early <= TARGET_LATE_VS_EARLY,
        }
        return res

    return run_in_directory(directory, "storage-bench-", body)


def _kib(n: float) -> str:
    return f"{n / 1024:,.2f} KiB" if n < 1024**2 else f"{n / 1024**2:,.2f} MiB"


def _workspace(g: Growth) -> str:
    """Early / late workspace bytes per turn, apparent (on disk)."""
    if not g.name.startswith("turnkeeper") or g.early is None or g.late is None:
        return ""
    early, late = g.early, g.late
    return (
        f"{_kib(early.workspace_bytes_per_turn)} ({_kib(early.workspace_disk_bytes_per_turn)})"
        f" / {_kib(late.workspace_bytes_per_turn)} ({_kib(late.workspace_disk_bytes_per_turn)})"
    )


def render(res: Results, console: Console) -> None:
    table = Table(title="bytes stored per turn, first vs last tenth of the run")
    add_columns(
        table,
        "system",
        "turns",
        "early SQL B/turn",
        "late SQL B/turn",
        "late/early",
        "early file B/turn",
        "late file B/turn",
        "workspace B/turn early / late (disk)",
        "rows/turn",
    )
    runs = [res.turnkeeper, res.turnkeeper_same_window, res.langgraph, res.langgraph_delta]
    for g in runs:
        if g is None or g.early is None or g.late is None:
            continue
        table.add_row(
            g.name,
            f"{g.early.first_turn:,}-{g.early.last_turn:,} / {g.late.first_turn:,}-"
            f"{g.late.last_turn:,}",
            _kib(g.early.sql_bytes_per_turn),
            _kib(g.late.sql_bytes_per_turn),
            f"{g.sql_late_vs_early:.2f}x",
            _kib(g.early.file_bytes_per_turn),
            _kib(g.late.file_bytes_per_turn),
            _workspace(g),
            f"{g.rows_per_turn:.1f}",
        )
    console.print(table)
    ex = res.langgraph_extrapolated
    lg = res.langgraph
    if ex is not None and lg is not None and lg.late is not None and res.turnkeeper.late:
        tk_late = res.turnkeeper.late.sql_bytes_per_turn
        console.print(
            f"LangGraph extrapolated (linear fit of its {lg.turns:,} turns) to turn {ex.turn:,}: "
            f"{_kib(ex.bytes_per_turn_at_turn)} per turn, {ex.total_bytes / 2**30:,.1f} GiB in "
            f"all — {ex.bytes_per_turn_at_turn / tk_late:,.0f}x turnkeeper's late turns"
        )
        same = res.turnkeeper_same_window
        if same is not None and same.late is not None:
            console.print(
                f"at turn {lg.turns:,}: LangGraph {_kib(lg.late.sql_bytes_per_turn)} per turn, "
                f"turnkeeper {_kib(same.late.sql_bytes_per_turn)} "
                f"({lg.late.sql_bytes_per_turn / same.late.sql_bytes_per_turn:,.0f}x)"
            )
    for name, why in res.skipped.items():
        console.print(f"[yellow]skipped {name}: {why}[/yellow]")
    render_targets(res.targets, console)
    render_machine(res.machine, console)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1,000 turns")
    parser.add_argument("--smoke", action="store_true", help="a few seconds: for the tests")
    parser.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    parser.add_argument("--turns", type=int, default=None, help="turnkeeper turns")
    parser.add_argument(
        "--delta",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also LangGraph's DeltaChannel (default: on in the full run)",
    )
    args = parser.parse_args(argv)
    settings = SMOKE if args.smoke else QUICK if args.quick else FULL
    if args.turns is not None:
        settings = replace(settings, turns=args.turns)
    if args.delta is not None:
        settings = replace(settings, delta=args.delta)
    res = run(settings, progress_printer(to_stderr=args.json))
    print_results(res, args.json, render)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
