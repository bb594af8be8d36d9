"""Every turnkeeper benchmark against its peers, in one run on one disk.

Run ``python -m benchmarks.run_all`` (``--quick`` for a shorter run, ``--smoke``
for the tests, ``--json`` for one JSON document on stdout, ``--only turn,storage``
to pick, ``--profile`` to add the cProfile breakdowns). Runs, in order, in one
scratch directory under ``.cache/`` (the project's disk, never tmpfs):

1. ``turn_bench`` — one durable turn vs a bare fsync'd commit, a DBOS step and a
   LangGraph node (interleaved rounds); turns/s with 1, 16 and 64 sessions;
2. ``recovery_bench`` — restart recovery with 100 turns in flight as history grows
   (10k, 100k, 1M events; ``--quick``: 10k and 100k);
3. ``storage_bench`` — bytes per turn early vs late in a 10,000-turn session
   (``--quick``: 1,000) beside LangGraph's checkpoints for the same conversation;
4. ``fleet_bench`` — the real ``turnkeeper run`` driving 1, 16, 64 and 256 sessions of
   ``sleep 1`` hosts: turns/s against the ideal, controller CPU per turn, peak RSS;
5. ``real_turn_bench`` — one real turn (host ``true``) beyond its host's own cost,
   beside the in-process turn and two bare commits;
6. ``restart_bench`` — SIGKILL ``turnkeeper run`` with 1, 16, 64 turns in flight,
   start it again: each session's time to its next turn.

Then one table of every target, met or missed. The peers come from the ``bench``
extra (``pip install -e '.[bench]'``); without it their rows say "skipped".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks import (
    fleet_bench,
    real_turn_bench,
    recovery_bench,
    restart_bench,
    storage_bench,
    turn_bench,
)
from benchmarks._common import (
    Say,
    describe_machine,
    load_average,
    machine,
    progress_printer,
    scratch_dir,
    table_console,
)
from benchmarks.peers import peer_versions

PARTS = ("turn", "recovery", "storage", "fleet", "real_turn", "restart")


def _settings(module: Any, mode: str) -> Any:
    return {"smoke": module.SMOKE, "quick": module.QUICK}.get(mode, module.FULL)


def run(
    mode: str,
    parts: tuple[str, ...],
    profile: bool,
    say: Say,
    save: Callable[[dict[str, Any]], None] = lambda _: None,
) -> dict[str, Any]:
    """Run ``parts`` in order; a part that fails is recorded under ``errors`` and the
    rest still run. ``save`` gets the results so far after every part."""
    out: dict[str, Any] = {"mode": mode, "parts": list(parts), "errors": {}}
    runners: dict[str, Callable[[Path], Any]] = {
        "turn": lambda d: turn_bench.run(
            replace(_settings(turn_bench, mode), profile_turns=200 if profile else 0), say, d
        ),
        "recovery": lambda d: recovery_bench.run(
            replace(_settings(recovery_bench, mode), profile=profile), say, d
        ),
        "storage": lambda d: storage_bench.run(_settings(storage_bench, mode), say, d),
        "fleet": lambda d: fleet_bench.run(
            replace(_settings(fleet_bench, mode), profile=profile), say, d
        ),
        "real_turn": lambda d: real_turn_bench.run(_settings(real_turn_bench, mode), say, d),
        "restart": lambda d: restart_bench.run(_settings(restart_bench, mode), say, d),
    }
    with scratch_dir("bench-all-") as work:
        out["machine"] = machine(work)
        out["versions"] = peer_versions()
        say(f"all benchmarks in {work}; machine: {describe_machine(out['machine'])}")
        started = time.perf_counter()
        for part in parts:
            say(f"[bold]== {part}_bench ==[/bold]")
            (work / part).mkdir()
            try:
                out[part] = runners[part](work / part)
            except Exception as exc:
                out["errors"][part] = f"{type(exc).__name__}: {exc}"
                say(f"[red]{part}_bench failed: {exc!r}[/red]")
                say(traceback.format_exc())
            out["seconds"] = time.perf_counter() - started
            out["loadavg_end"] = load_average()
            out["targets"] = {
                f"{name}.{key}": target
                for name in PARTS
                if name in out
                for key, target in out[name].targets.items()
            }
            save(out)
    return out


def render(out: dict[str, Any], console: Console) -> None:
    if "turn" in out:
        turn_bench.render(out["turn"], console)
    if "recovery" in out:
        recovery_bench.render(out["recovery"], console)
    if "storage" in out:
        storage_bench.render(out["storage"], console)
    for name, module in (
        ("fleet", fleet_bench),
        ("real_turn", real_turn_bench),
        ("restart", restart_bench),
    ):
        if name in out:
            module.render(out[name], console)
    table = Table(title=f"targets ({out['mode']} run, {out['seconds']:.0f} s)")
    table.add_column("target")
    table.add_column("wanted", justify="right")
    table.add_column("measured", justify="right")
    table.add_column("", justify="center")
    for name, target in out["targets"].items():
        mark = "[green]met[/green]" if target["met"] else "[red]missed[/red]"
        table.add_row(name, target["target"], f"{target['value']:.2f}", mark)
    console.print(table)
    console.print(f"machine: {describe_machine(out['machine'])}")
    console.print(
        f"load average at the start {out['machine']['loadavg']}, at the end "
        f"{out['loadavg_end']}; versions: {out['versions']}"
    )


def to_json(out: dict[str, Any]) -> dict[str, Any]:
    return {k: asdict(v) if hasattr(v, "__dataclass_fields__") else v for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a shorter run (minutes)")
    parser.add_argument("--smoke", action="store_true", help="seconds: for the tests")
    parser.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    parser.add_argument("--profile", action="store_true", help="add cProfile breakdowns")
    parser.add_argument(
        "--only", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}"
    )
    parser.add_argument("--save", type=Path, help="also write the JSON results to this file")
    args = parser.parse_args(argv)
    parts = tuple(p for p in PARTS if p in args.only.split(","))
    if not parts:
        parser.error(f"--only names none of {', '.join(PARTS)}")
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"

    def save(partial: dict[str, Any]) -> None:
        if args.save:
            args.save.write_text(json.dumps(to_json(partial), indent=2) + "\n")

    out = run(mode, parts, args.profile, progress_printer(to_stderr=args.json), save)
    doc = to_json(out)
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        render(out, table_console())
    return 1 if out["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
