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

The history is built in :mod:`benchmarks.recovery_history`, each restart run and
timed by :mod:`benchmarks.recovery_restart`; this module sizes, drives and reports.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._common import (
    Say,
    add_columns,
    announce_machine,
    count_events,
    git_workspace,
    load_average,
    print_results,
    progress_printer,
    render_machine,
    render_profile,
    render_targets,
    run_in_directory,
)
from benchmarks.recovery_history import (
    checkpoint,
    crash_in_flight,
    dead_owner,
    dead_process,
    grow,
    record_templates,
)
from benchmarks.recovery_restart import Tier, restart, run_child
from turnkeeper.store import open_store

TARGET_SECONDS_AT_LARGEST = 2.0


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
class Results:
    machine: dict[str, Any]
    settings: dict[str, Any]
    template: dict[str, Any]
    tiers: list[Tier] = field(default_factory=list)
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    profile: dict[str, Any] | None = None  # per recovered session, at the largest size


def run(settings: Settings, say: Say, directory: Path | None = None) -> Results:
    def body(work: Path) -> Results:
        info = announce_machine(work, say)
        git_workspace(work / "workspace")
        dead = dead_process()
        owner = dead_owner(*dead)
        say("recording the templates through the real runtime ...")
        templates = record_templates(
            work, settings.inflight_turns, settings.turns_per_session, owner, say
        )
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
        crash_in_flight(store, templates, settings.in_flight, owner, dead, say)
        store.close()
        closed = 0
        for size in settings.sizes:
            say(f"history of {size:,} events: growing the store ...")
            t0 = time.perf_counter()
            _, added = grow(db, templates, size, closed, settings.batch_events, say)
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
            restart(work, db, tier, settings.repeats, settings.in_flight, say)
            if settings.profile and size == settings.sizes[-1]:
                shutil.copyfile(db, work / "restart.db")
                out, _ = run_child(work / "restart.db", settings.in_flight, profile=True)
                res.profile = out["profile"]
                say("  profiled one more restart (cProfile)")
            res.tiers.append(tier)
        res.machine["loadavg_end"] = load_average()
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

    return run_in_directory(directory, "recovery-bench-", body)


def render(res: Results, console: Console) -> None:
    table = Table(
        title=f"restart recovery, {res.settings['in_flight']} turns in flight (medians of "
        f"{res.settings['repeats']} restarts)"
    )
    add_columns(
        table,
        "history",
        "sessions",
        "db size",
        "open store",
        "list sessions",
        "open -> all recovered",
        "fastest",
        "per session",
        "vs smallest",
        "fresh process",
    )
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
    render_targets(res.targets, console)
    render_machine(res.machine, console)
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
    args = parser.parse_args(argv)
    settings = SMOKE if args.smoke else QUICK if args.quick else FULL
    if args.in_flight is not None:
        settings = replace(settings, in_flight=args.in_flight)
    if args.repeats is not None:
        settings = replace(settings, repeats=args.repeats)
    if args.profile:
        settings = replace(settings, profile=True)
    res = run(settings, progress_printer(to_stderr=args.json))
    print_results(res, args.json, render)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
