"""Recovery benchmark: restart after a SIGKILL with 100 turns in flight, as history grows.

Run ``python -m benchmarks.recovery_bench`` (``--quick``: 10k and 100k events;
``--smoke`` for the tests; ``--json`` for machine-readable output). Everything
runs on the project's own disk (a temp dir under ``.cache/``), never tmpfs.

Setup, once:

* a *template* is recorded through the real runtime: a goal, a todo that never
  finishes, a session driven by the controller's loop with a no-op host —
  a few turns (the template of a session that is mid-work) and then on to 100
  turns and closed (the template of finished history). Its lease is held by a
  controller whose process the benchmark started and SIGKILLed, as after a real
  crash. (The clones' workspace-snapshot references, ids rewritten, name git refs
  that do not exist: recovering a lost turn does not read them; a revert would.)
* the store under test is filled by cloning the template's goal and session
  streams under fresh ids (every id in every payload rewritten), appended
  directly through the store API, ``durable=False`` in batches, each batch
  closed by one durable commit — the same events, checksums and projections the
  runtime writes, at a fraction of the cost;
* ``--in-flight`` (100) sessions are cloned from the mid-work template and each
  is driven into one more turn through the real turn driver with a host whose
  process is the SIGKILLed one; reading its events "kills" the control plane
  (the turn is accepted and host-started, with no receipt).

Then for each history size (10k, 100k, 1M events) the store is grown with closed
sessions, its WAL folded into the file, and the file copied for each repeat; a
fresh process — a control plane restarting — opens the copy and runs
``Controller.run()`` over every session until the last in-flight one is
recovered (lease taken over from the dead controller, the host proven gone, the
turn recorded ``lost_on_restore``, the recovery report written), then stops
before any new turn. Reported: the wall time from opening the store to the last
recovery (the median over repeats), the phases, and the fresh process's whole
wall time including Python start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import (
    LEASE_SECONDS,
    PROJECT_ROOT,
    Say,
    TurnLoop,
    describe_machine,
    git_workspace,
    machine,
    profile_ops,
    progress_printer,
    render_profile,
    scratch_dir,
    table_console,
)
from benchmarks.noop_host import CrashAfterStartHost, NoopHost, SimulatedCrash
from turnkeeper.hosts import process_tree
from turnkeeper.kernel.session import NextTurn, SetStatus, plan_next_turn
from turnkeeper.runtime.controller import Controller, ControllerConfig
from turnkeeper.runtime.goals import goal_stream
from turnkeeper.runtime.planning import goal_view
from turnkeeper.runtime.sessions import session_stream
from turnkeeper.store import IndexEntry, NewEvent, SqlEventStore, open_store

TARGET_SECONDS_AT_LARGEST = 2.0
TEMPLATE_SESSION = "0badcafe-0000-4000-8000-000000000000"
TEMPLATE_GOAL = "goal-template00"
TEMPLATE_TODO = "todo-template00"
TURN_ID = re.compile(r"turn-[0-9a-f]{16}")


@dataclass
class Settings:
    sizes: tuple[int, ...]
    in_flight: int = 100
    turns_per_session: int = 100  # a closed historical session
    inflight_turns: int = 5  # turns a mid-work session has done before the crash
    repeats: int = 3
    batch_events: int = 50_000  # cheap appends between durable commits
    profile: bool = False  # one more, profiled restart at the largest size


FULL = Settings(sizes=(10_000, 100_000, 1_000_000))
QUICK = Settings(sizes=(10_000, 100_000), repeats=2)
SMOKE = Settings(
    sizes=(1_000, 2_000), in_flight=3, turns_per_session=6, inflight_turns=2, repeats=1
)


@dataclass
class Tier:
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


@dataclass
class Results:
    machine: dict[str, Any]
    settings: dict[str, Any]
    template: dict[str, Any]
    tiers: list[Tier] = field(default_factory=list)
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    profile: dict[str, Any] | None = None  # per recovered session, at the largest size


# -- a dead process --------------------------------------------------------------------


def dead_process() -> tuple[int, int]:
    """Start a process, SIGKILL it, reap it: its (pid, start time) name nothing alive."""
    proc = subprocess.Popen(["sleep", "600"])
    try:
        identity = process_tree.identify(proc.pid, "bench-dead")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return identity.pid, identity.start_time


def dead_owner(pid: int, start_time: int) -> str:
    """The lease-owner name a controller in that dead process would have had."""
    return f"ctl:{socket.gethostname()}:{pid}:{start_time}"


# -- the template ----------------------------------------------------------------------


@dataclass
class StreamTemplate:
    """A stream recorded once, with every id turned into a placeholder."""

    stream_key: str  # "session" or "goal"
    kind: str
    events: list[tuple[str, int, list[str | int]]]  # type, schema version, pieces
    state: list[str | int]
    schema_version: int
    index: list[tuple[list[str | int], str]]


class Templater:
    """Splits text into literal pieces and id slots; ``fill`` puts a clone's ids back.

    Slots: 0 the session id, 1 the goal id, 2 the todo id, 3+j the j-th turn id.
    """

    def __init__(self) -> None:
        self.turns: dict[str, int] = {}

    def split(self, text: str) -> list[str | int]:
        fixed = {TEMPLATE_SESSION: 0, TEMPLATE_GOAL: 1, TEMPLATE_TODO: 2}
        pattern = "|".join([*(re.escape(k) for k in fixed), TURN_ID.pattern])
        out: list[str | int] = []
        pos = 0
        for m in re.finditer(pattern, text):
            if m.start() > pos:
                out.append(text[pos : m.start()])
            token = m.group(0)
            if token in fixed:
                out.append(fixed[token])
            else:
                out.append(3 + self.turns.setdefault(token, len(self.turns)))
            pos = m.end()
        if pos < len(text):
            out.append(text[pos:])
        return out

    @staticmethod
    def fill(pieces: list[str | int], ids: list[str]) -> str:
        return "".join(p if isinstance(p, str) else ids[p] for p in pieces)


def _capture(
    db: Path, store: SqlEventStore, stream: str, key: str, templater: Templater
) -> StreamTemplate:
    projection = store.read_projection(stream)
    assert projection is not None
    records = store.read_stream(stream)
    conn = sqlite3.connect(db)
    try:
        index = conn.execute(
            "SELECT entity_id, entity_kind FROM entity_index WHERE stream_id = ?", (stream,)
        ).fetchall()
    finally:
        conn.close()
    return StreamTemplate(
        stream_key=key,
        kind=projection.kind,
        events=[(r.type, r.schema_version, templater.split(r.payload)) for r in records],
        state=templater.split(projection.state),
        schema_version=projection.schema_version,
        index=[(templater.split(str(e)), str(k)) for e, k in index],
    )


@dataclass
class Templates:
    mid_work: list[StreamTemplate]  # goal + session, lease held by the dead controller
    closed: list[StreamTemplate]  # goal + session, closed after turns_per_session turns
    turn_slots: int
    closed_events: int
    mid_work_events: int
    closed_payload_bytes: int


def record_templates(work: Path, settings: Settings, owner: str, say: Say) -> Templates:
    db = work / "template.db"
    store = open_store(db)
    loop = TurnLoop(
        store,
        work / "workspace",
        "template",
        owner=owner,
        goal_id=TEMPLATE_GOAL,
        todo_id=TEMPLATE_TODO,
        session_id=TEMPLATE_SESSION,
    )
    ctl = loop.controller
    templater = Templater()
    for _ in range(settings.inflight_turns):
        loop.step()
    mid = [
        _capture(db, store, goal_stream(TEMPLATE_GOAL), "goal", templater),
        _capture(db, store, session_stream(TEMPLATE_SESSION), "session", templater),
    ]
    for _ in range(settings.turns_per_session - settings.inflight_turns):
        loop.step()
    ctl.sessions.execute(
        TEMPLATE_SESSION,
        SetStatus(lease=ctl.token(TEMPLATE_SESSION), action="close", reason="work done"),
    )
    closed = [
        _capture(db, store, goal_stream(TEMPLATE_GOAL), "goal", templater),
        _capture(db, store, session_stream(TEMPLATE_SESSION), "session", templater),
    ]
    store.close()
    payload = sum(sum(len(p) if isinstance(p, str) else 36 for p in e[2]) for e in closed[1].events)
    say(
        f"  template: {len(closed[1].events)} session + {len(closed[0].events)} goal events "
        f"for {settings.turns_per_session} turns (~{payload // len(closed[1].events)} B/event)"
    )
    return Templates(
        mid_work=mid,
        closed=closed,
        turn_slots=len(templater.turns),
        closed_events=sum(len(t.events) for t in closed),
        mid_work_events=sum(len(t.events) for t in mid),
        closed_payload_bytes=payload,
    )


# -- cloning ---------------------------------------------------------------------------


IN_FLIGHT, CLOSED = 1, 2  # id spaces of the two kinds of clone


def _clone_ids(space: int, n: int, turn_slots: int) -> list[str]:
    # Same shapes and lengths as the runtime's ids (uuid4, turn-<16 hex>).
    return [
        f"{n:08x}-{space:04x}-4000-8000-{n:012x}",
        f"goal-{space}-{n:010d}",
        f"todo-{space}-{n:010d}",
        *(f"turn-{space:x}{n:07x}{j:08x}" for j in range(turn_slots)),
    ]


def append_clone(
    store: SqlEventStore, templates: list[StreamTemplate], ids: list[str], durable: bool
) -> int:
    """Append one clone of a goal + session; the events written."""
    written = 0
    fill = Templater.fill
    for t in templates:
        stream = session_stream(ids[0]) if t.stream_key == "session" else goal_stream(ids[1])
        events = [
            NewEvent(type=typ, schema_version=sv, payload=fill(pieces, ids))
            for typ, sv, pieces in t.events
        ]
        index = [IndexEntry(entity_id=fill(e, ids), entity_kind=k) for e, k in t.index]
        store.append(
            stream,
            t.kind,
            0,
            events,
            fill(t.state, ids),
            t.schema_version,
            index,
            durable=durable,
        )
        written += len(events)
    return written


def count_events(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        (n,) = conn.execute("SELECT COUNT(*) FROM events").fetchone()
        return int(n)
    finally:
        conn.close()


def checkpoint(db: Path) -> int:
    """Fold the WAL into the database file; the file's size."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.close()
    return db.stat().st_size


def crash_in_flight(
    store: SqlEventStore,
    templates: Templates,
    settings: Settings,
    owner: str,
    dead: tuple[int, int],
    say: Say,
) -> list[str]:
    """Clone the mid-work sessions and drive each into a turn the control plane dies in."""
    host = CrashAfterStartHost(dead_pid=dead[0], dead_start_time=dead[1])
    ctl = Controller(
        store,
        ControllerConfig(lease_seconds=LEASE_SECONDS, host_loader=host.loader),
        owner=owner,
    )
    sids = []
    for i in range(settings.in_flight):
        ids = _clone_ids(IN_FLIGHT, i, templates.turn_slots)
        append_clone(store, templates.mid_work, ids, durable=False)
        sid = ids[0]
        ctl.acquire(sid)
        session = ctl.sessions.load(sid)
        now = ctl.sessions.now()
        plan = plan_next_turn(session, goal_view(ctl.goals.load(session.goal_id), sid, now), now)
        assert isinstance(plan, NextTurn), plan
        try:
            ctl.driver.run_turn(session, plan)
        except SimulatedCrash:
            pass
        else:
            raise AssertionError("the crashing host did not crash the turn")
        in_flight = ctl.sessions.load(sid).in_flight
        assert in_flight is not None, f"session {sid}: no turn in flight after the crash"
        sids.append(sid)
    say(f"  {len(sids)} sessions with a turn in flight (host pid {dead[0]}, SIGKILLed)")
    return sids


def grow(
    db: Path, templates: Templates, target: int, start: int, settings: Settings, say: Say
) -> tuple[int, int]:
    """Add closed sessions until the store holds ``target`` events; (events, sessions added).

    Clones are appended with ``durable=False``; every ``batch_events`` events, and at
    the end, one durable append makes all the cheap ones before it durable too.
    """
    events = first = count_events(db)
    store = open_store(db)
    n = start
    since_durable = 0
    t0 = last_say = time.perf_counter()
    try:
        while events < target:
            remaining = target - events
            durable = (
                since_durable + templates.closed_events >= settings.batch_events
                or templates.closed_events >= remaining
            )
            written = append_clone(
                store, templates.closed, _clone_ids(CLOSED, n, templates.turn_slots), durable
            )
            n += 1
            events += written
            since_durable = 0 if durable else since_durable + written
            now = time.perf_counter()
            if now - last_say > 2.0:
                rate = (events - first) / (now - t0)
                say(f"    {events:,} / {target:,} events ({rate:,.0f} events/s)")
                last_say = now
    finally:
        store.close()
    return events, n - start


# -- the restarted control plane (a child process) ----------------------------------------


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
            if lost >= expect:
                controller.request_stop()  # every in-flight turn is recovered

    controller = Controller(
        store,
        ControllerConfig(lease_seconds=LEASE_SECONDS, host_loader=host.loader),
        progress=progress,
    )
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
    extra = ["--child-profile"] if profile else []
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.recovery_bench",
            "--child",
            str(db),
            str(expect),
            *extra,
        ],
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


# -- driver ----------------------------------------------------------------------------


def restart(work: Path, db: Path, tier: Tier, settings: Settings, say: Say) -> None:
    """``settings.repeats`` restarts, each on a fresh copy of ``db``, into ``tier``."""
    for r in range(settings.repeats):
        copy = work / "restart.db"
        shutil.copyfile(db, copy)
        out, wall = run_child(copy, settings.in_flight)
        copy.unlink()
        for suffix in ("-wal", "-shm"):
            Path(f"{copy}{suffix}").unlink(missing_ok=True)
        if out["turns_marked_lost"] != settings.in_flight:
            raise RuntimeError(f"recovery marked {out['turns_marked_lost']} turns lost")
        tier.recover_s.append(out["recover_s"])
        tier.open_s.append(out["open_s"])
        tier.list_s.append(out["list_s"])
        tier.process_s.append(wall)
        tier.recovered.append(out["sessions_recovered"])
        say(
            f"  restart {r + 1}/{settings.repeats}: {out['recover_s']:.3f} s to recover "
            f"{out['turns_marked_lost']} in-flight turns (opened in "
            f"{out['open_s']:.3f} s, sessions listed in {out['list_s']:.3f} s); "
            f"fresh process {wall:.2f} s"
        )
    tier.median_recover_s = statistics.median(tier.recover_s)
    tier.min_recover_s = min(tier.recover_s)
    tier.median_process_s = statistics.median(tier.process_s)
    tier.per_session_ms = tier.median_recover_s * 1000 / settings.in_flight


def run(settings: Settings, say: Say, directory: Path | None = None) -> Results:
    def body(work: Path) -> Results:
        info = machine(work)
        say(f"working in {work} ({info['disk_filesystem']} on {info['disk_device']})")
        say(f"machine: {describe_machine(info)}")
        git_workspace(work / "workspace")
        dead = dead_process()
        owner = dead_owner(*dead)
        say("recording the templates through the real runtime ...")
        templates = record_templates(work, settings, owner, say)
        res = Results(
            machine=info,
            settings=asdict(settings),
            template={
                "closed_session_events": templates.closed_events,
                "mid_work_session_events": templates.mid_work_events,
                "closed_payload_bytes": templates.closed_payload_bytes,
            },
        )
        db = work / "history.db"
        store = open_store(db)
        say(f"crashing {settings.in_flight} sessions mid-turn ...")
        crash_in_flight(store, templates, settings, owner, dead, say)
        store.close()
        closed = 0
        for size in settings.sizes:
            say(f"history of {size:,} events: growing the store ...")
            t0 = time.perf_counter()
            _, added = grow(db, templates, size, closed, settings, say)
            closed += added
            db_bytes = checkpoint(db)
            build = time.perf_counter() - t0
            tier = Tier(
                events=count_events(db),
                sessions=closed + settings.in_flight,
                closed_sessions=closed,
                db_bytes=db_bytes,
                build_s=build,
            )
            say(
                f"  {tier.events:,} events in {tier.sessions:,} sessions, "
                f"{db_bytes / 2**20:,.1f} MiB, grown in {build:.1f} s"
            )
            restart(work, db, tier, settings, say)
            if settings.profile and size == settings.sizes[-1]:
                shutil.copyfile(db, work / "restart.db")
                out, _ = run_child(work / "restart.db", settings.in_flight, profile=True)
                res.profile = out["profile"]
                say("  profiled one more restart (cProfile)")
            res.tiers.append(tier)
        res.machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        largest, smallest = res.tiers[-1], res.tiers[0]
        res.targets = {
            "recover_at_largest": {
                "target": f"< {TARGET_SECONDS_AT_LARGEST} s at {largest.events:,} events",
                "value": largest.median_recover_s,
                "met": largest.median_recover_s < TARGET_SECONDS_AT_LARGEST,
            },
            "growth_largest_vs_smallest": {
                "target": "close to flat",
                "value": largest.median_recover_s / smallest.median_recover_s,
                "met": largest.median_recover_s / smallest.median_recover_s < 1.5,
            },
        }
        return res

    if directory is not None:
        return body(directory)
    with scratch_dir("recovery-bench-") as work:
        return body(work)


def render(res: Results, console: Console) -> None:
    table = Table(
        title=f"restart recovery, {res.settings['in_flight']} turns in flight (medians of "
        f"{res.settings['repeats']} restarts)"
    )
    table.add_column("history")
    table.add_column("sessions", justify="right")
    table.add_column("db size", justify="right")
    table.add_column("open store", justify="right")
    table.add_column("list sessions", justify="right")
    table.add_column("open -> all recovered", justify="right")
    table.add_column("fastest", justify="right")
    table.add_column("per session", justify="right")
    table.add_column("vs smallest", justify="right")
    table.add_column("fresh process", justify="right")
    base = res.tiers[0].median_recover_s if res.tiers else 1.0
    for t in res.tiers:
        table.add_row(
            f"{t.events:,} events",
            f"{t.sessions:,}",
            f"{t.db_bytes / 2**20:,.0f} MiB",
            f"{statistics.median(t.open_s):.3f} s",
            f"{statistics.median(t.list_s):.3f} s" if t.list_s else "",
            f"{t.median_recover_s:.3f} s",
            f"{t.min_recover_s:.3f} s",
            f"{t.per_session_ms:.1f} ms",
            f"{t.median_recover_s / base:.2f}x",
            f"{t.median_process_s:.2f} s",
        )
    console.print(table)
    for name, target in res.targets.items():
        mark = "[green]met[/green]" if target["met"] else "[red]missed[/red]"
        console.print(f"target {name}: {target['target']}: {target['value']:.3f} {mark}")
    console.print(f"machine: {describe_machine(res.machine)}")
    console.print(f"load average at the end: {res.machine.get('loadavg_end')}")
    if res.profile:
        render_profile(res.profile, console, unit="recovered session")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="10k and 100k events only")
    parser.add_argument("--smoke", action="store_true", help="a few seconds: for the tests")
    parser.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    parser.add_argument("--in-flight", type=int, default=None, help="turns in flight (100)")
    parser.add_argument("--repeats", type=int, default=None, help="restarts per history size")
    parser.add_argument(
        "--profile", action="store_true", help="one more restart at the largest size, profiled"
    )
    parser.add_argument("--child", nargs=2, metavar=("DB", "EXPECT"), help=argparse.SUPPRESS)
    parser.add_argument("--child-profile", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        out = recover_child(Path(args.child[0]), int(args.child[1]), args.child_profile)
        sys.stdout.write(json.dumps(out) + "\n")
        return 0
    settings = SMOKE if args.smoke else QUICK if args.quick else FULL
    if args.in_flight is not None:
        settings = replace(settings, in_flight=args.in_flight)
    if args.repeats is not None:
        settings = replace(settings, repeats=args.repeats)
    if args.profile:
        settings = replace(settings, profile=True)
    res = run(settings, progress_printer(to_stderr=args.json))
    if args.json:
        sys.stdout.write(json.dumps(asdict(res), indent=2) + "\n")
    else:
        render(res, table_console())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
