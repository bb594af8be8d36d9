"""Turn benchmark: the cost of one durable turn against its peers, and turns per second.

Run ``python -m benchmarks.turn_bench`` (``--quick`` for a short run, ``--smoke``
for the tests, ``--json`` for machine-readable output, ``--profile N`` to add a
cProfile of N turns). Everything runs on the project's own disk (a temp dir under
``.cache/``), never tmpfs, in one process run:

1. **Latency**, rounds interleaved (the order rotates every round) so machine noise
   hits every candidate alike; medians in microseconds and ratios to (a):

   (a) a bare fsync'd commit: plain ``sqlite3``, WAL, ``synchronous=FULL``, one insert;
   (b) one turnkeeper turn with an in-process no-op host, as the controller's loop
       runs it: load the session, plan from the goal, ``TurnDriver.run_turn`` (accept,
       host started, host events, receipt, write-back, completion). The todo never
       finishes, so every turn is a continuation. The workspace is a git
       repository, so each completed turn also takes its workspace snapshot. Also
       counted: commits per turn, fsync'd and cheap;
   (b') the same turn in a plain-directory workspace: no git, so no snapshot;
   (c) one DBOS step: ``@DBOS.step`` inside a ``@DBOS.workflow``, SQLite system DB.
       A step records only its output: one commit, half the durability of a turn;
   (c') a DBOS turn at the turn's durability: an intent step and a result step per
       turn inside a long-running workflow (two commits, as the turn's two fsyncs);
   (c'') the same two steps as a workflow of its own per turn, as a DBOS application
       runs one unit of work (DBOS also records the workflow's start and end);
   (d) one LangGraph node: a one-node graph invoked per turn on one thread id,
       ``SqliteSaver``, ``durability="sync"``.

2. **Throughput**: turns per second with 1, 16 and 64 sessions in one process —
   one thread per session, each with its own goal, session and controller, all
   sharing one store (and so its group commit).

The peers, (c) to (d), are also compared with (b) round by round (the median of each
round's ratio). They need the ``bench`` extra; without it they are skipped, and said so.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import (
    CommitCounter,
    Say,
    TurnLoop,
    announce_machine,
    git_workspace,
    judged,
    load_average,
    print_results,
    profile_ops,
    progress_printer,
    render_machine,
    render_profile,
    run_in_directory,
    timed,
)
from benchmarks.peers import (
    BareCommit,
    DbosStep,
    DbosTurn,
    LangGraphNode,
    Peer,
    missing_peers,
    peer_versions,
)
from turnkeeper.store import open_store

BARE, TURN, DBOS, LANGGRAPH = "bare_commit", "turnkeeper_turn", "dbos_step", "langgraph_node"
TURN_PLAIN = "turnkeeper_turn_plain_dir"
DBOS_TURN, DBOS_WORKFLOW = "dbos_turn_two_steps", "dbos_workflow_per_turn"
# The peers compared with the turn itself, round by round.
PEERS = (DBOS, DBOS_TURN, DBOS_WORKFLOW, LANGGRAPH)
LABELS = {
    BARE: "(a) bare fsync'd sqlite3 commit, 1 insert",
    TURN: "(b) turnkeeper turn, no-op host, git workspace (load, plan, run_turn)",
    TURN_PLAIN: "(b') the same turn, workspace a plain directory (no git: no snapshot)",
    DBOS: "(c) one DBOS step in a workflow (SQLite): its output only, half a turn's durability",
    DBOS_TURN: "(c') DBOS turn: intent step + result step in a long workflow (equal durability)",
    DBOS_WORKFLOW: "(c'') DBOS turn as a workflow of its own (intent + result steps)",
    LANGGRAPH: '(d) LangGraph graph invoked per turn, SqliteSaver, durability="sync"',
}
SHORT = {
    BARE: "bare",
    TURN: "turn",
    TURN_PLAIN: "turn-plain",
    DBOS: "dbos",
    DBOS_TURN: "dbos-turn",
    DBOS_WORKFLOW: "dbos-wf",
    LANGGRAPH: "langgraph",
}
# The targets, as ratios: turn / bare, dbos / turn, langgraph / turn, 64 / 1.
TARGET_TURN_VS_BARE = 2.5
TARGET_DBOS_VS_TURN = 4.0
TARGET_LANGGRAPH_VS_TURN = 2.0
TARGET_SCALING = 10.0


@dataclass
class Settings:
    rounds: int
    ops_per_round: int
    warmup: int
    seconds: float  # per throughput measurement
    sessions: tuple[int, ...] = (1, 16, 64)
    profile_turns: int = 0


QUICK = Settings(rounds=4, ops_per_round=40, warmup=10, seconds=2.0)
FULL = Settings(rounds=10, ops_per_round=100, warmup=30, seconds=8.0)
SMOKE = Settings(rounds=2, ops_per_round=3, warmup=1, seconds=0.2, sessions=(1, 2))


@dataclass
class Latency:
    median_us: dict[str, float] = field(default_factory=dict)
    ratio_to_bare: dict[str, float] = field(default_factory=dict)
    # Per round: each candidate's median over that round's bare median, and each
    # peer's over that round's turn (git workspace).
    round_ratios: dict[str, list[float]] = field(default_factory=dict)
    round_ratios_to_turn: dict[str, list[float]] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)
    durable_commits_per_turn: float = 0.0
    cheap_commits_per_turn: float = 0.0
    commits_counted_exactly: bool = False
    langgraph_checkpoints_per_invoke: float = 0.0


@dataclass
class Throughput:
    sessions: int
    turns: int
    seconds: float
    turns_per_s: float
    ratio_to_one: float
    commits_per_s: float
    appends_per_commit: float
    # CPU time of the whole process (every thread) per turn, and per second of wall
    # time: near 1.0 core with the GIL means the turns are bound by Python, not the disk.
    cpu_ms_per_turn: float = 0.0
    cpu_cores_busy: float = 0.0


@dataclass
class Results:
    machine: dict[str, Any]
    versions: dict[str, str]
    settings: dict[str, Any]
    latency: Latency
    throughput: dict[str, Throughput] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    profile: dict[str, Any] | None = None


# -- 1. latency ------------------------------------------------------------------------


class TurnPeer:
    """turnkeeper's turn as a peer: ``samples(n)`` runs ``n`` turns.

    With ``git`` the session's workspace is a git repository, so every completed turn
    also takes its workspace snapshot (what a revert restores); without, a plain
    directory, which turnkeeper accepts and does not snapshot.
    """

    def __init__(self, directory: Path, key: str, git: bool) -> None:
        self.name = LABELS[key]
        self.store = open_store(directory / f"{key}.db")
        workspace = directory / f"{key}-workspace"
        if git:
            git_workspace(workspace)
        else:
            workspace.mkdir()
        self.loop = TurnLoop(self.store, workspace, key)
        self.counter = CommitCounter(self.store)

    def samples(self, n: int) -> list[float]:
        return timed(self.loop.step, n)

    def close(self) -> None:
        self.loop.release()
        self.store.close()


def candidates(directory: Path, skipped: dict[str, str]) -> tuple[dict[str, Peer], TurnPeer]:
    """Every candidate not skipped, in the order of :data:`LABELS`, and the turn."""
    peers: dict[str, Peer] = {BARE: BareCommit(directory)}
    turn = TurnPeer(directory, TURN, git=True)
    peers[TURN] = turn
    peers[TURN_PLAIN] = TurnPeer(directory, TURN_PLAIN, git=False)
    if DBOS not in skipped:
        step = DbosStep(directory)
        peers[DBOS] = step
        peers[DBOS_TURN] = DbosTurn(step, per_turn_workflow=False)
        peers[DBOS_WORKFLOW] = DbosTurn(step, per_turn_workflow=True)
    if LANGGRAPH not in skipped:
        peers[LANGGRAPH] = LangGraphNode(directory)
    return peers, turn


def measure_latency(
    directory: Path, settings: Settings, say: Say, skipped: dict[str, str]
) -> tuple[Latency, TurnPeer]:
    peers, turn = candidates(directory, skipped)
    names = list(peers)
    say(f"  warm-up: {settings.warmup} ops each")
    for name in names:
        peers[name].samples(settings.warmup)
    turn.counter.reset()
    turns_before = turn.loop.turns
    lg = peers.get(LANGGRAPH)
    lg_before = lg.checkpoints() if isinstance(lg, LangGraphNode) else 0
    samples: dict[str, list[float]] = {name: [] for name in names}
    res = Latency(
        round_ratios={name: [] for name in names if name != BARE},
        round_ratios_to_turn={name: [] for name in names if name in PEERS},
    )
    for r in range(settings.rounds):
        shift = r % len(names)
        order = names[shift:] + names[:shift]
        if r % 2:
            order.reverse()
        now = {name: peers[name].samples(settings.ops_per_round) for name in order}
        bare = statistics.median(now[BARE])
        parts = [f"bare {bare:7.1f} us"]
        for name in names:
            samples[name] += now[name]
            if name == BARE:
                continue
            med = statistics.median(now[name])
            res.round_ratios[name].append(med / bare)
            if name in PEERS:
                res.round_ratios_to_turn[name].append(med / statistics.median(now[TURN]))
            parts.append(f"{SHORT[name]} {med:8.1f} ({med / bare:5.1f}x)")
        say(f"  round {r + 1}/{settings.rounds}: " + ", ".join(parts))
    turns = turn.loop.turns - turns_before
    res.durable_commits_per_turn = turn.counter.durable / turns
    res.cheap_commits_per_turn = turn.counter.cheap / turns
    res.commits_counted_exactly = turn.counter.exact
    if not turn.counter.exact:
        res.durable_commits_per_turn = turn.counter.total / turns
    if isinstance(lg, LangGraphNode):
        invokes = settings.rounds * settings.ops_per_round
        res.langgraph_checkpoints_per_invoke = (lg.checkpoints() - lg_before) / invokes
    for name in names:
        res.median_us[name] = statistics.median(samples[name])
        res.samples[name] = len(samples[name])
    for name in names:
        res.ratio_to_bare[name] = res.median_us[name] / res.median_us[BARE]
    for peer in peers.values():
        if peer is not turn:
            peer.close()  # the git-workspace turn stays open for the profile
    return res, turn


# -- 2. throughput ---------------------------------------------------------------------


def measure_throughput(directory: Path, sessions: int, seconds: float) -> Throughput:
    """Turns in ``seconds`` with one thread per session, all on one store."""
    store = open_store(directory / f"throughput-{sessions}.db")
    loops = [
        TurnLoop(store, git_workspace(directory / f"ws-{sessions}-{i}"), f"t{sessions}-{i}")
        for i in range(sessions)
    ]
    stop = threading.Event()
    counts = [0] * sessions
    errors: list[BaseException] = []
    start = threading.Barrier(sessions + 1)

    def run(i: int) -> None:
        loop = loops[i]
        try:
            loop.step()  # the first turn is a "start": not in the window
            start.wait()
            n = 0
            while not stop.is_set():
                loop.step()
                n += 1
            counts[i] = n
        except BaseException as exc:
            errors.append(exc)
            start.abort()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(sessions)]
    for t in threads:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        start.wait()
    commits0, reqs0 = store.writer.commits, store.writer.committed_requests
    t0, cpu0 = time.perf_counter(), time.process_time()
    stop.wait(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    commits = store.writer.commits - commits0
    reqs = store.writer.committed_requests - reqs0
    for loop in loops:
        loop.release()
    store.close()
    if errors:
        raise RuntimeError(f"a session thread failed: {errors[0]!r}") from errors[0]
    turns = sum(counts)
    return Throughput(
        sessions=sessions,
        turns=turns,
        seconds=elapsed,
        turns_per_s=turns / elapsed,
        ratio_to_one=0.0,
        commits_per_s=commits / elapsed,
        appends_per_commit=reqs / max(commits, 1),
        cpu_ms_per_turn=cpu * 1000 / max(turns, 1),
        cpu_cores_busy=cpu / elapsed,
    )


# -- driver ----------------------------------------------------------------------------


def _target(value: float, at_most: float | None = None, at_least: float | None = None) -> Any:
    return judged(value, at_most=at_most, at_least=at_least, unit="x")


def _targets(res: Results) -> dict[str, dict[str, Any]]:
    """The issue's targets, judged on the git-workspace turn (the usual setup) and, with
    the suffix ``_plain_dir``, on the turn without a workspace snapshot."""
    med = res.latency.median_us
    out: dict[str, dict[str, Any]] = {}
    for key, suffix in ((TURN, ""), (TURN_PLAIN, "_plain_dir")):
        if key not in med:
            continue
        out[f"turn_vs_bare{suffix}"] = _target(med[key] / med[BARE], at_most=TARGET_TURN_VS_BARE)
        if DBOS in med:
            out[f"dbos_vs_turn{suffix}"] = _target(
                med[DBOS] / med[key], at_least=TARGET_DBOS_VS_TURN
            )
        if LANGGRAPH in med:
            out[f"langgraph_vs_turn{suffix}"] = _target(
                med[LANGGRAPH] / med[key], at_least=TARGET_LANGGRAPH_VS_TURN
            )
    most = max((int(k) for k in res.throughput), default=1)
    if most > 1 and "1" in res.throughput:
        value = res.throughput[str(most)].ratio_to_one
        out[f"sessions_{most}_vs_1"] = _target(value, at_least=TARGET_SCALING)
    return out


def run(settings: Settings, say: Say, directory: Path | None = None) -> Results:
    def body(work: Path) -> Results:
        skipped: dict[str, str] = {}
        missing = missing_peers()
        if "dbos" in missing:
            for name in (DBOS, DBOS_TURN, DBOS_WORKFLOW):
                skipped[name] = missing["dbos"]
        if "langgraph" in missing:
            skipped[LANGGRAPH] = missing["langgraph"]
        for name, why in skipped.items():
            say(f"[yellow]skipping {LABELS[name]}: {why}[/yellow]")
        info = announce_machine(work, say)
        say(
            f"1. latency: {settings.rounds} interleaved rounds x {settings.ops_per_round} ops "
            "per candidate"
        )
        latency, turn = measure_latency(work, settings, say, skipped)
        profile = None
        if settings.profile_turns:
            say(f"   profiling {settings.profile_turns} turns (cProfile) ...")
            profile = profile_ops(turn.loop.step, settings.profile_turns)
        turn.close()
        res = Results(
            machine=info,
            versions=peer_versions(),
            settings=asdict(settings),
            latency=latency,
            skipped=skipped,
            profile=profile,
        )
        base = 0.0
        for n in settings.sessions:
            say(f"2. {n} session(s), one thread each, one store, {settings.seconds:.1f} s ...")
            tp = measure_throughput(work, n, settings.seconds)
            base = base or tp.turns_per_s
            tp.ratio_to_one = tp.turns_per_s / base if base else 0.0
            res.throughput[str(n)] = tp
            say(
                f"   {tp.turns_per_s:,.1f} turns/s ({tp.ratio_to_one:.2f}x), "
                f"{tp.commits_per_s:,.0f} commits/s, {tp.appends_per_commit:.2f} appends/commit, "
                f"{tp.cpu_ms_per_turn:.1f} ms CPU/turn, {tp.cpu_cores_busy:.2f} cores busy"
            )
        res.machine["loadavg_end"] = load_average()
        res.targets = _targets(res)
        return res

    return run_in_directory(directory, "turn-bench-", body)


def _met(target: dict[str, Any] | None) -> str:
    if target is None:
        return ""
    mark = "[green]met[/green]" if target["met"] else "[red]missed[/red]"
    return f"{target['target']} {mark}"


def render(res: Results, console: Console) -> None:
    lat = res.latency
    table = Table(title="turnkeeper turn benchmark (medians, interleaved rounds)")
    table.add_column("measurement")
    table.add_column("median", justify="right")
    table.add_column("vs (a)", justify="right")
    table.add_column("per-round ratio", justify="right")
    table.add_column("target", justify="right")
    target_of = {
        TURN: res.targets.get("turn_vs_bare"),
        TURN_PLAIN: res.targets.get("turn_vs_bare_plain_dir"),
        DBOS: res.targets.get("dbos_vs_turn"),
        LANGGRAPH: res.targets.get("langgraph_vs_turn"),
    }
    for name, label in LABELS.items():
        if name in res.skipped:
            table.add_row(label, "skipped", "", "", res.skipped[name])
            continue
        if name not in lat.median_us:
            continue
        rounds = lat.round_ratios.get(name)
        per_round = f"{statistics.median(rounds):.2f}x" if rounds else ""
        extra = ""
        if name in PEERS:
            to_turn = statistics.median(lat.round_ratios_to_turn[name])
            extra = f" = {lat.median_us[name] / lat.median_us[TURN]:.2f}x (b)"
            extra += f" (per round {to_turn:.2f}x)"
            if TURN_PLAIN in lat.median_us:
                extra += f", {lat.median_us[name] / lat.median_us[TURN_PLAIN]:.2f}x (b')"
        table.add_row(
            label + extra,
            f"{lat.median_us[name]:,.1f} us",
            f"{lat.ratio_to_bare[name]:.2f}x",
            per_round,
            _met(target_of.get(name)),
        )
    exact = "" if lat.commits_counted_exactly else " (all commits; split unavailable)"
    table.add_row(
        f"    commits per turn{exact}",
        f"{lat.durable_commits_per_turn:.2f} fsync'd + {lat.cheap_commits_per_turn:.2f} cheap",
        "",
        "",
        "",
    )
    if lat.langgraph_checkpoints_per_invoke:
        table.add_row(
            "    LangGraph checkpoints written per invoke",
            f"{lat.langgraph_checkpoints_per_invoke:.1f}",
            "",
            "",
            "",
        )
    for key, tp in res.throughput.items():
        target = res.targets.get(f"sessions_{key}_vs_1") if key != "1" else None
        table.add_row(
            f"sessions: {tp.sessions} (threads, one store; {tp.appends_per_commit:.1f} "
            f"appends/commit; {tp.cpu_ms_per_turn:.1f} ms CPU/turn, "
            f"{tp.cpu_cores_busy:.2f} cores busy)",
            f"{tp.turns_per_s:,.1f} turns/s",
            f"{tp.ratio_to_one:.2f}x of 1",
            "",
            _met(target),
        )
    console.print(table)
    render_machine(res.machine, console)
    if res.profile:
        render_profile(res.profile, console, unit="turn")


def parse(argv: list[str] | None) -> tuple[Settings, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a short run (about a minute)")
    parser.add_argument("--smoke", action="store_true", help="a few seconds: for the tests")
    parser.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile N turns")
    args = parser.parse_args(argv)
    settings = SMOKE if args.smoke else QUICK if args.quick else FULL
    settings = replace(settings, profile_turns=args.profile)
    return settings, args


def main(argv: list[str] | None = None, runner: Callable[..., Results] = run) -> int:
    settings, args = parse(argv)
    res = runner(settings, progress_printer(to_stderr=args.json))
    print_results(res, args.json, render)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
