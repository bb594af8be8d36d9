"""PostgreSQL benchmark: a durable turn against one bare committed insert, DBOS on the
same server, and turns per second with 1, 2 and 4 worker processes.

Run ``python -m benchmarks.pg_bench --database-url postgresql://USER@HOST:PORT/DB``
(``--quick``, ``--smoke`` for the tests, ``--json``, ``--profile N`` for a cProfile of
N turns). The URL names any database the user may connect to and create databases
from; the benchmark creates its own databases (``tk_pgbench_<hex>_*``) and drops
them at the end. In one run, on one server:

1. **Latency**, rounds interleaved (the order rotates every round), medians in
   microseconds and ratios to (a):

   (a) a bare committed insert: psycopg, one prepared ``INSERT`` of an event-shaped
       row, ``COMMIT`` — the floor of anything durable on this server;
   (b) one turnkeeper turn, as ``turn_bench`` runs it (load, plan,
       ``TurnDriver.run_turn``, in-process no-op host, git workspace) on a store
       opened with ``open_store("postgresql://...")``; (b') the same turn in a plain
       directory (no workspace snapshot);
   (s) one durable ``SqlEventStore.append`` (one event and its projection);
   (c) one DBOS step: ``@DBOS.step`` in a long-running ``@DBOS.workflow``, DBOS's
       system database on the same server; (c') a DBOS turn at the turn's
       durability: an intent step and a result step, two commits.

   Then **the wire**, counted outside the client library (``_pg_wire.WireTap``, a
   relay in front of the server that parses the server's messages): per operation,
   round trips (a request flight and its answer), the server's ``COMMIT``s, its
   statements by kind; and the server's own count of committed transactions in the
   benchmark's database (``pg_stat_database.xact_commit``: reads outside a
   transaction count too). For (a), (s), (b) and (c'), each on fresh connections
   through the relay after a warm-up; the latency rounds never go through it.

2. **Workers**: the real ``turnkeeper run --worker`` in 1, 2 and 4 processes sharing
   one database's sessions (see ``_pg_fleet``): turns per second while every session
   runs, and where the CPU went — the workers, their hosts, the database's backends.
   With ``--netns``, the same again with each worker in a network namespace of its
   own, reaching a throwaway cluster over a veth link (``_pg_netns``; needs root).
"""

from __future__ import annotations

import statistics
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import (
    Say,
    add_columns,
    announce_machine,
    benchmark_arguments,
    chosen_settings,
    judged,
    load_average,
    print_results,
    profile_ops,
    progress_printer,
    render_machine,
    render_profile,
    render_targets,
    run_in_directory,
)
from benchmarks._pg_fleet import FleetPoint, run_fleet
from benchmarks._pg_netns import render_netns, run_netns_fleet, why_not
from benchmarks._pg_peers import (
    BareInsert,
    PgDbosStep,
    PgDbosTurn,
    PgTurn,
    StoreAppend,
    create_database,
    drop_database,
    server_commits,
    server_settings,
    server_version,
)
from benchmarks._pg_wire import WireTap
from benchmarks.peers import Peer, missing_peers, peer_versions

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
BARE, TURN, TURN_PLAIN, APPEND, DBOS, DBOS_TURN = (
    "bare_insert",
    "turn",
    "turn_plain_dir",
    "append",
    "dbos_step",
    "dbos_turn",
)
LABELS = {
    BARE: "(a) bare committed insert (psycopg, prepared INSERT + COMMIT)",
    TURN: "(b) turnkeeper turn, no-op host, git workspace (load, plan, run_turn)",
    TURN_PLAIN: "(b') the same turn, plain-directory workspace (no snapshot)",
    APPEND: "(s) one durable SqlEventStore.append (1 event + projection)",
    DBOS: "(c) one DBOS step in a long workflow (PostgreSQL system database)",
    DBOS_TURN: "(c') DBOS turn: intent step + result step (two commits, as (b))",
}
SHORT = {
    BARE: "bare",
    TURN: "turn",
    TURN_PLAIN: "plain",
    APPEND: "append",
    DBOS: "dbos",
    DBOS_TURN: "dbos2",
}
# What the wire phase counts, in the order shown.
WIRE_LABELS = {
    BARE: "(a) bare insert",
    APPEND: "(s) append",
    TURN: "(b) turn",
    DBOS_TURN: "(c') DBOS turn",
}
TARGET_TURN_VS_BARE = 3.0
TARGET_WORKERS_4_VS_1 = 1.0


@dataclass
class Settings:
    rounds: int
    ops_per_round: int
    warmup: int
    wire_turns: int
    sessions: int
    todos: int  # per session: each turn completes one
    workers: tuple[int, ...] = (1, 2, 4)
    repeats: int = 1
    profile_turns: int = 0
    netns: bool = False


FULL = Settings(
    rounds=10, ops_per_round=100, warmup=20, wire_turns=50, sessions=32, todos=12, repeats=2
)
QUICK = Settings(rounds=4, ops_per_round=40, warmup=10, wire_turns=20, sessions=32, todos=8)
SMOKE = Settings(
    rounds=2, ops_per_round=3, warmup=1, wire_turns=2, sessions=4, todos=4, workers=(1, 2)
)


@dataclass
class Latency:
    median_us: dict[str, float] = field(default_factory=dict)
    ratio_to_bare: dict[str, float] = field(default_factory=dict)
    round_ratios: dict[str, list[float]] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)
    turn_cpu_us: float = 0.0  # this process's CPU per turn (git workspace)
    durable_commits_per_turn: float = 0.0
    cheap_commits_per_turn: float = 0.0
    wire: dict[str, Any] = field(default_factory=dict)


@dataclass
class Results:
    machine: dict[str, Any]
    versions: dict[str, str]
    server: dict[str, str]
    settings: dict[str, Any]
    latency: Latency
    fleet: dict[str, list[FleetPoint]] = field(default_factory=dict)
    fleet_median_turns_per_s: dict[str, float] = field(default_factory=dict)
    # Each worker in a namespace of its own (``--netns``), on a throwaway cluster.
    netns_fleet: dict[str, list[FleetPoint]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    profile: dict[str, Any] | None = None
    database_prefix: str = ""  # every database the run made is named <prefix>_<what>


class Databases:
    """The run's databases on the server, all named ``<prefix>_<what>``, dropped by
    :meth:`drop_all` whatever happened."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.prefix = f"tk_pgbench_{uuid.uuid4().hex[:8]}"
        self.made: list[str] = []

    def make(self, what: str) -> tuple[str, str]:
        name = f"{self.prefix}_{what}"
        url = create_database(self.server, name)
        self.made.append(name)
        return name, url

    def drop_all(self) -> None:
        for name in reversed(self.made):
            drop_database(self.server, name)
        self.made.clear()


# -- 1. latency ------------------------------------------------------------------------


def measure_latency(
    work: Path, dbs: Databases, settings: Settings, say: Say, skipped: dict[str, str]
) -> tuple[Latency, dict[str, Any] | None]:
    _, store_url = dbs.make("turns")
    _, peers_url = dbs.make("peers")
    peers: dict[str, Peer] = {}
    try:
        peers[BARE] = BareInsert(peers_url)
        turn = PgTurn(store_url, work, "git", git=True)
        peers[TURN] = turn
        peers[TURN_PLAIN] = PgTurn(store_url, work, "plain", git=False)
        peers[APPEND] = StoreAppend(store_url)
        if DBOS not in skipped:
            _, dbos_url = dbs.make("dbos")
            peers[DBOS] = PgDbosStep(dbos_url)
            peers[DBOS_TURN] = PgDbosTurn()
        res = _rounds(peers, turn, settings, say)
        profile = None
        if settings.profile_turns:
            say(f"   profiling {settings.profile_turns} turns (cProfile) ...")
            profile = profile_ops(turn.loop.step, settings.profile_turns)
        return res, profile
    finally:
        for peer in peers.values():
            peer.close()


def measure_wire(
    work: Path, dbs: Databases, settings: Settings, say: Say, skipped: dict[str, str]
) -> dict[str, dict[str, Any]]:
    """Each peer alone, in a database of its own, on fresh connections through a
    :class:`WireTap`: warmed up, then ``wire_turns`` operations counted on the wire and
    by the server, then closed before the next one starts."""
    n, warm = settings.wire_turns, settings.warmup
    say(f"   the wire: {n} operations each through a counting relay")
    out: dict[str, dict[str, Any]] = {}
    tap = WireTap(dbs.server)
    try:
        for key, label in WIRE_LABELS.items():
            if key == DBOS_TURN and DBOS in skipped:
                continue
            name, url = dbs.make(f"wire_{key}")
            via = tap.url(url)
            step: PgDbosStep | None = None
            peer: Peer
            if key == BARE:
                peer = BareInsert(via)
            elif key == APPEND:
                peer = StoreAppend(via)
            elif key == TURN:
                peer = PgTurn(via, work, "wire", git=True)
            else:
                step, peer = PgDbosStep(via), PgDbosTurn()
            try:
                peer.samples(warm)
                before = server_commits(dbs.server, name)
                with tap.counting() as count:
                    peer.samples(n)
                out[key] = {**count.per(n), "server_commits": 0.0}
                out[key]["server_commits"] = (server_commits(dbs.server, name) - before) / n
            finally:
                peer.close()
                if step is not None:
                    step.close()
            say(f"   {label}: {_wire_line(out[key])}")
    finally:
        tap.close()
    return out


def _wire_line(w: dict[str, Any]) -> str:
    kinds = ", ".join(f"{k} {v:.1f}" for k, v in w["statements"].items())
    return (
        f"{w['round_trips']:.1f} round trips, {w['commits']:.1f} COMMITs, "
        f"{w['server_commits']:.1f} server transactions; statements: {kinds}"
    )


def _rounds(peers: dict[str, Peer], turn: PgTurn, settings: Settings, say: Say) -> Latency:
    names = list(peers)
    say(f"  warm-up: {settings.warmup} ops each")
    for name in names:
        peers[name].samples(settings.warmup)
    turn.counter.reset()
    turn.cpu_s, turn.turns = 0.0, 0
    samples: dict[str, list[float]] = {name: [] for name in names}
    res = Latency(round_ratios={name: [] for name in names if name != BARE})
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
            if name != BARE:
                med = statistics.median(now[name])
                res.round_ratios[name].append(med / bare)
                parts.append(f"{SHORT[name]} {med:8.1f} ({med / bare:5.1f}x)")
        say(f"  round {r + 1}/{settings.rounds}: " + ", ".join(parts))
    for name in names:
        res.median_us[name] = statistics.median(samples[name])
        res.samples[name] = len(samples[name])
        res.ratio_to_bare[name] = res.median_us[name] / res.median_us[BARE]
    res.turn_cpu_us = turn.cpu_s * 1e6 / max(turn.turns, 1)
    res.durable_commits_per_turn = turn.counter.durable / max(turn.turns, 1)
    res.cheap_commits_per_turn = turn.counter.cheap / max(turn.turns, 1)
    return res


# -- 2. workers ------------------------------------------------------------------------


def measure_fleet(
    work: Path, dbs: Databases, settings: Settings, say: Say
) -> dict[str, list[FleetPoint]]:
    out: dict[str, list[FleetPoint]] = {str(k): [] for k in settings.workers}
    for repeat in range(settings.repeats):
        order = list(settings.workers)
        if repeat % 2:
            order.reverse()
        for k in order:
            name, url = dbs.make(f"w{k}_{repeat}")
            say(f"2. {k} worker process(es), {settings.sessions} sessions (repeat {repeat + 1})")
            point = run_fleet(
                work / f"fleet-{k}-{repeat}",
                dbs.server,
                name,
                url,
                k,
                settings.sessions,
                settings.todos,
                say,
            )
            out[str(k)].append(point)
            say(
                f"   {point.turns_per_s:,.1f} turns/s ({point.window_turns} turns in "
                f"{point.window_s:.2f} s, {point.window}); CPU cores: "
                f"workers {point.workers_cores:.2f}, "
                f"hosts {point.hosts_cores:.2f}, database {point.database_cores:.2f}, "
                f"machine {point.machine_busy_cores:.2f}; {point.database_xacts_per_turn:.1f} "
                f"server transactions/turn; limit: {point.limit} ({point.why})"
            )
            drop_database(dbs.server, name)
            dbs.made.remove(name)
    return out


# -- driver ----------------------------------------------------------------------------


def _targets(res: Results) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    med = res.latency.median_us
    out["turn_vs_bare"] = judged(med[TURN] / med[BARE], at_most=TARGET_TURN_VS_BARE, unit="x")
    tps = res.fleet_median_turns_per_s
    most = str(max(int(k) for k in tps)) if tps else None
    if most is not None and most != "1" and "1" in tps and tps["1"] > 0:
        out[f"workers_{most}_vs_1"] = judged(
            tps[most] / tps["1"], at_least=TARGET_WORKERS_4_VS_1, unit="x"
        )
    return out


def run(settings: Settings, say: Say, server: str = DEFAULT_URL) -> Results:
    def body(work: Path) -> Results:
        skipped: dict[str, str] = {}
        if "dbos" in missing_peers():
            skipped[DBOS] = missing_peers()["dbos"]
            say(f"[yellow]skipping {LABELS[DBOS]}: {skipped[DBOS]}[/yellow]")
        info = announce_machine(work, say)
        version = server_version(server)
        say(f"PostgreSQL {version} at {server}")
        dbs = Databases(server)
        try:
            say(f"1. latency: {settings.rounds} interleaved rounds x {settings.ops_per_round} ops")
            latency, profile = measure_latency(work, dbs, settings, say, skipped)
            latency.wire = measure_wire(work, dbs, settings, say, skipped)
            res = Results(
                machine=info,
                versions=peer_versions(),
                server={"version": version, **server_settings(server)},
                settings=asdict(settings),
                latency=latency,
                skipped=skipped,
                profile=profile,
                database_prefix=dbs.prefix,
            )
            res.fleet = measure_fleet(work, dbs, settings, say)
            if settings.netns:
                why = why_not()
                if why is None:
                    res.netns_fleet = run_netns_fleet(
                        work, settings.workers, settings.sessions, settings.todos,
                        settings.repeats, say,
                    )  # fmt: skip
                else:
                    res.skipped["netns"] = why
                    say(f"[yellow]skipping the workers in namespaces: {why}[/yellow]")
        finally:
            dbs.drop_all()
        base = 0.0
        for key, points in res.fleet.items():
            res.fleet_median_turns_per_s[key] = statistics.median(p.turns_per_s for p in points)
        base = res.fleet_median_turns_per_s.get("1", 0.0)
        for points in res.fleet.values():
            for p in points:
                p.ratio_to_one = p.turns_per_s / base if base else 0.0
        if res.netns_fleet.get("1"):
            one = statistics.median(p.turns_per_s for p in res.netns_fleet["1"])
            for points in res.netns_fleet.values():
                for p in points:
                    p.ratio_to_one = p.turns_per_s / one if one else 0.0
        res.machine["loadavg_end"] = load_average()
        res.targets = _targets(res)
        return res

    return run_in_directory(None, "pg-bench-", body)


def render(res: Results, console: Console) -> None:
    lat = res.latency
    table = Table(
        title=f"PostgreSQL {res.server.get('version', '')}: latency (medians, interleaved)"
    )
    add_columns(table, "measurement", "median", "vs (a)", "per-round ratio")
    for name, label in LABELS.items():
        if name in res.skipped:
            table.add_row(label, "skipped", "", res.skipped[name])
        elif name in lat.median_us:
            rounds = lat.round_ratios.get(name)
            per_round = f"{statistics.median(rounds):.2f}x" if rounds else ""
            table.add_row(
                label,
                f"{lat.median_us[name]:,.1f} us",
                f"{lat.ratio_to_bare[name]:.2f}x",
                per_round,
            )
    table.add_row("    the turn's CPU in this process", f"{lat.turn_cpu_us:,.0f} us", "", "")
    table.add_row(
        "    commits per turn",
        f"{lat.durable_commits_per_turn:.2f} durable + {lat.cheap_commits_per_turn:.2f} async",
        "",
        "",
    )
    console.print(table)
    if lat.wire:
        wire = Table(title="the wire, per operation (counted on a relay and by the server)")
        add_columns(
            wire, "operation", "round trips", "COMMITs", "server transactions", "statements"
        )
        for key, label in WIRE_LABELS.items():
            w = lat.wire.get(key)
            if w is None:
                continue
            kinds = ", ".join(f"{k} {v:.1f}" for k, v in w["statements"].items())
            wire.add_row(
                label,
                f"{w['round_trips']:.1f}",
                f"{w['commits']:.1f}",
                f"{w['server_commits']:.1f}",
                kinds,
            )
        console.print(wire)
    fleet = Table(title="turnkeeper run --worker processes on one database")
    add_columns(
        fleet, "workers", "turns/s", "vs 1", "workers CPU", "hosts CPU", "database CPU",
        "machine busy", "DB ms/turn", "xacts/turn", "limit",
    )  # fmt: skip
    for key, points in res.fleet.items():
        for p in points:
            fleet.add_row(
                key, f"{p.turns_per_s:,.1f}", f"{p.ratio_to_one:.2f}x", f"{p.workers_cores:.2f}",
                f"{p.hosts_cores:.2f}", f"{p.database_cores:.2f}", f"{p.machine_busy_cores:.2f}",
                f"{p.database_cpu_ms_per_turn:.2f}", f"{p.database_xacts_per_turn:.1f}",
                f"{p.limit}: {p.why}",
            )  # fmt: skip
    console.print(fleet)
    if res.netns_fleet:
        render_netns(res.netns_fleet, console)
    render_targets(res.targets, console)
    console.print(f"server: {res.server}")
    render_machine(res.machine, console)
    if res.profile:
        render_profile(res.profile, console, unit="turn")


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_arguments(__doc__, "a short run (about two minutes)")
    parser.add_argument("--database-url", default=DEFAULT_URL, help="the PostgreSQL server")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile N turns")
    parser.add_argument(
        "--netns",
        action="store_true",
        help="also run the workers each in a network namespace of its own (root)",
    )
    args = parser.parse_args(argv)
    settings = replace(
        chosen_settings(args, FULL, QUICK, SMOKE), profile_turns=args.profile, netns=args.netns
    )
    res = run(settings, progress_printer(to_stderr=args.json), args.database_url)
    print_results(res, args.json, render)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
