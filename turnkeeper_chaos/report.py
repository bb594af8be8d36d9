"""The chaos run's figures: per mode and in total, as a Rich table or as JSON."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from turnkeeper.json_types import JsonDict
from turnkeeper_chaos.checks import Violation
from turnkeeper_chaos.scenarios import MODES, ScenarioResult


@dataclass
class Row:
    """Figures summed over some scenarios."""

    scenarios: int = 0
    runs: int = 0
    kills: int = 0
    kills_in_recovery: int = 0
    kills_at_startup: int = 0
    back_to_back: int = 0  # the longest run of kills before a run was let finish
    crash_points: set[str] = field(default_factory=set)
    recoveries: int = 0
    turns: int = 0
    lost: int = 0
    failed: int = 0
    host_runs: int = 0
    effects: int = 0
    indeterminate: int = 0
    gates_resolved: int = 0
    violations: int = 0
    seconds: float = 0.0

    def add(self, r: ScenarioResult) -> None:
        self.scenarios += 1
        self.runs += r.runs
        self.kills += r.kills
        self.kills_in_recovery += r.kills_in_recovery
        self.kills_at_startup += r.kills_at_startup
        self.back_to_back = max(self.back_to_back, r.back_to_back)
        self.crash_points.update(hit.partition("#")[0] for hit in r.crash_points)
        f = r.facts
        self.recoveries += f.recoveries
        self.turns += f.turns
        self.lost += f.lost
        self.failed += f.failed
        self.host_runs += f.host_runs
        self.effects += f.effects_applied
        self.indeterminate += f.effects_indeterminate
        self.gates_resolved += f.gates_resolved
        self.violations += len(r.violations)
        self.seconds += r.seconds

    def to_json(self) -> JsonDict:
        # Every field in order; the two that are not JSON numbers as they stand, made so.
        return {
            **vars(self),
            "crash_points": sorted(self.crash_points),
            "seconds": round(self.seconds, 1),
        }


@dataclass
class ChaosReport:
    seed: int
    modes: list[str]
    kills_asked: int
    all_points: list[str]
    results: list[ScenarioResult] = field(default_factory=list)
    elapsed: float = 0.0
    base_dir: Path | None = None
    kept: bool = False
    random_time_limited: bool = False

    @property
    def violations(self) -> list[Violation]:
        return [v for r in self.results for v in r.violations]

    @property
    def ok(self) -> bool:
        return not self.violations

    def rows(self) -> dict[str, Row]:
        rows: dict[str, Row] = {m: Row() for m in MODES if m in self.modes}
        for result in self.results:
            rows.setdefault(result.mode, Row()).add(result)
        total = Row()
        for result in self.results:
            total.add(result)
        rows["total"] = total
        return rows

    def points_missed(self) -> list[str]:
        if "enumerated" not in self.modes:
            return []
        hit = self.rows()["total"].crash_points
        return [p for p in self.all_points if p not in hit]

    def to_json(self) -> JsonDict:
        hits = Counter(h.partition("#")[0] for r in self.results for h in r.crash_points)
        return {
            "ok": self.ok,
            "seed": self.seed,
            "modes": list(self.modes),
            "kills_asked": self.kills_asked,
            "random_time_limited": self.random_time_limited,
            "elapsed_seconds": round(self.elapsed, 1),
            "base_dir": str(self.base_dir) if self.base_dir else None,
            "kept": self.kept,
            "crash_points": {
                "all": list(self.all_points),
                "hits": dict(sorted(hits.items())),
                "missed": list(self.points_missed()),
            },
            "rows": {name: row.to_json() for name, row in self.rows().items()},
            "violations": [vars(v) for v in self.violations],
            "scenarios": [
                {
                    "name": r.name,
                    "mode": r.mode,
                    "ok": r.ok,
                    "kills": r.kills,
                    "crash_points": list(r.crash_points),
                    "runs": r.runs,
                    "turns": r.facts.turns,
                    "effects": r.facts.effects_applied,
                    "seconds": round(r.seconds, 1),
                    "dir": str(r.root) if (self.kept or not r.ok) else None,
                }
                for r in self.results
            ],
        }


def _figures(row: Row, n_points: int) -> list[str]:
    violations = f"[bold red]{row.violations}[/]" if row.violations else "[green]0[/]"
    return [
        str(row.scenarios),
        f"{len(row.crash_points)}/{n_points}" if row.crash_points else "-",
        str(row.kills),
        str(row.kills_in_recovery),
        str(row.kills_at_startup),
        str(row.back_to_back),
        str(row.recoveries),
        str(row.turns),
        f"{row.lost} / {row.failed}",
        str(row.host_runs),
        str(row.effects),
        f"{row.indeterminate} / {row.gates_resolved}",
        violations,
    ]


_METRICS = (
    "scenarios",
    "crash points hit",
    "control-plane SIGKILLs",
    "  during recovery",
    "  during start-up",
    "  most in a row",
    "recoveries that acted",
    "turns accepted",
    "  lost / host failed",
    "host runs (runs.jsonl)",
    "effect keys applied once",
    "indeterminate / gated",
    "violations",
)


def render(report: ChaosReport, console: Console) -> None:
    rows = report.rows()
    table = Table(title=f"turnkeeper chaos (seed {report.seed})", title_justify="left")
    table.add_column("")
    for name in rows:
        table.add_column(f"[bold]{name}[/]" if name == "total" else name, justify="right")
    columns = [_figures(row, len(report.all_points)) for row in rows.values()]
    for index, metric in enumerate(_METRICS):
        table.add_row(metric, *(column[index] for column in columns))
    console.print(table)
    missed = report.points_missed()
    if missed:
        console.print(f"[bold red]crash points never hit:[/] {', '.join(missed)}")
    if report.random_time_limited:
        console.print("[yellow]random mode stopped at its time limit before all kills[/]")
    if report.violations:
        vt = Table(title="violations", title_justify="left")
        for name in ("scenario", "invariant", "detail"):
            vt.add_column(name, overflow="fold")
        for v in report.violations[:50]:
            vt.add_row(v.scenario, v.invariant, escape(v.detail))
        console.print(vt)
        kept = [str(r.root) for r in report.results if not r.ok]
        console.print(f"directories of failing scenarios kept: {', '.join(kept)}", markup=False)
    elif report.kept and report.base_dir is not None:
        console.print(f"scenario directories kept under {report.base_dir}", markup=False)
    verdict = "[bold green]no violations[/]" if report.ok else "[bold red]VIOLATIONS[/]"
    console.print(f"{verdict} in {report.elapsed:.0f}s")
