"""Per-turn overhead of turnkeeper around a real agent CLI.

Run ``python -m benchmarks.agent_overhead`` (``--turns N``, ``--cli codex|claude``,
``--json``). Needs the pinned CLIs (``scripts/install_agent_clis.sh``); the model is
the tests' fake server on 127.0.0.1, answering every prompt with one shell command
(``true``) and then a message, so a turn is two model calls and one real command.

For each CLI, in one process run, alternating so machine noise hits both alike:

(a) direct: the exact command line and environment the host builds, run with
    ``subprocess.run`` and the prompt on stdin — a fresh CLI session each time;
(b) turnkeeper: one ``start`` turn through the turn driver on a real project
    (SQLite store on this disk, not tmpfs): claim the todo, ``turn.accepted``,
    host started, journaled host events, receipt, session-file digest,
    write-back (``todo_done``), ``turn.completed``.

It prints the median wall time of each, their ratio, and the difference.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.agents.conftest import CliKit, codex_user_config, make_repo
from tests.agents.fakes import (
    FakeAnthropicServer,
    FakeModelServer,
    FakeResponsesServer,
    Rule,
    Shell,
    Text,
)
from turnkeeper.hosts import TurnKind, TurnRequest
from turnkeeper.hosts.agent_cli import cached_binary, install_cache_dir
from turnkeeper.hosts.claude import ClaudeHost, session_id_for
from turnkeeper.hosts.claude import build_command as claude_command
from turnkeeper.hosts.codex import CodexHost, codex_home, native_binary
from turnkeeper.hosts.codex import build_command as codex_command
from turnkeeper.hosts.subprocess_config import SubprocessHostConfig
from turnkeeper.hosts.subprocess_host import turn_env
from turnkeeper.kernel.proposals import AddTodo, CreateGoal, TodoSpec
from turnkeeper.kernel.session import NextTurn, plan_next_turn
from turnkeeper.runtime.control.controller import Controller, ControllerConfig
from turnkeeper.runtime.services.project import init_project
from turnkeeper.runtime.turn.planning import goal_view
from turnkeeper.store import open_store

PROJECT_ROOT = Path(__file__).resolve().parent.parent
GOAL = "bench"


@dataclass
class Result:
    cli: str
    turns: int
    direct_median_s: float
    turnkeeper_median_s: float
    ratio: float
    overhead_ms: float
    direct_s: list[float]
    turnkeeper_s: list[float]


def _server(cli: str) -> FakeModelServer:
    rules = [Rule("todo", [Shell("true"), Text("Done.")])]
    return FakeResponsesServer(rules) if cli == "codex" else FakeAnthropicServer(rules)


def _direct_command(
    cli: str, config: dict[str, Any], request: TurnRequest
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment the host would use for ``request``."""
    if cli == "codex":
        codex = CodexHost(config)
        cfg = codex.config_for(request)
        binary = native_binary(Path(str(cfg.binary)))
        args = codex_command(cfg, request, binary)
        extra = {"CODEX_HOME": str(codex_home(cfg))}
    else:
        claude = ClaudeHost(config)
        ccfg = claude.config_for(request)
        args = claude_command(
            ccfg, request, Path(str(ccfg.binary)), session_id_for(request.turn_id)
        )
        extra = {"CLAUDE_CONFIG_DIR": str(ccfg.config_dir), "DISABLE_AUTOUPDATER": "1"}
    env = turn_env(request, SubprocessHostConfig(command=["x"], env={**extra, **config["env"]}))
    return args, env


def bench_cli(cli: str, turns: int, root: Path) -> Result:
    binary = cached_binary(cli)
    if binary is None:
        raise SystemExit(
            f"{cli} is not installed in {install_cache_dir()}: run scripts/install_agent_clis.sh"
        )
    server = _server(cli).start()
    try:
        home = root / f"{cli}-home"
        if cli == "codex":
            codex_user_config(home, server.base_url)
        else:
            home.mkdir()
        kit = CliKit(name=cli, binary=binary, server=server, home=home)
        config = kit.host_config()
        repo = make_repo(root / f"{cli}-repo")
        direct_ws = make_repo(root / f"{cli}-direct")
        project, _ = init_project(root / f"{cli}-project")
        store = open_store(project.database_url)
        try:
            controller = Controller(store, ControllerConfig(lease_seconds=120))
            controller.goals.create(CreateGoal(goal_id=GOAL, title="benchmark"))
            for n in range(turns):
                spec = TodoSpec(todo_id=f"t{n:03d}", title=f"todo {n}")
                controller.goals.submit(GOAL, AddTodo(todo=spec))
            sid = controller.sessions.create(GOAL, repo, cli, config).session_id
            controller.acquire(sid)
            direct: list[float] = []
            through: list[float] = []
            for n in range(turns):
                # (a) the same CLI call, made directly
                request = TurnRequest(
                    turn_id=f"direct-{n}",
                    session_id="direct",
                    generation=1,
                    attempt=1,
                    kind=TurnKind.START,
                    instructions=f"Start todo t{n:03d}: todo {n} (attempt 1).",
                    workspace=direct_ws,
                )
                args, env = _direct_command(cli, config, request)
                started = time.perf_counter()
                proc = subprocess.run(
                    args, input=request.instructions.encode(), cwd=direct_ws, env=env,
                    capture_output=True, check=False,
                )  # fmt: skip
                direct.append(time.perf_counter() - started)
                if proc.returncode != 0:
                    raise SystemExit(f"direct {cli} call failed: {proc.stderr.decode()[-2000:]}")
                # (b) one turn through turnkeeper
                session = controller.sessions.load(sid)
                now = controller.sessions.now()
                plan = plan_next_turn(
                    session, goal_view(controller.goals.load(GOAL), session, now), now
                )
                assert isinstance(plan, NextTurn), plan
                started = time.perf_counter()
                result = controller.driver.run_turn(session, plan)
                through.append(time.perf_counter() - started)
                if not result.succeeded:
                    raise SystemExit(f"turnkeeper {cli} turn failed: {result.outcome.message}")
            controller.release(sid)
        finally:
            store.close()
    finally:
        server.stop()
    d, t = statistics.median(direct), statistics.median(through)
    return Result(
        cli=cli,
        turns=turns,
        direct_median_s=round(d, 4),
        turnkeeper_median_s=round(t, 4),
        ratio=round(t / d, 3),
        overhead_ms=round((t - d) * 1000, 1),
        direct_s=[round(x, 4) for x in direct],
        turnkeeper_s=[round(x, 4) for x in through],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=7, help="turns per CLI (default 7)")
    parser.add_argument("--cli", choices=["codex", "claude"], action="append")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    cache = PROJECT_ROOT / ".cache"
    cache.mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="agent-overhead-", dir=cache))
    try:
        results = [bench_cli(cli, args.turns, root) for cli in args.cli or ["codex", "claude"]]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
        return 0
    print(f"per-turn wall time, median of {args.turns} (one shell command, two model calls)")
    print(f"{'cli':8} {'direct':>10} {'turnkeeper':>12} {'ratio':>7} {'overhead':>10}")
    for r in results:
        print(
            f"{r.cli:8} {r.direct_median_s * 1000:8.0f}ms {r.turnkeeper_median_s * 1000:10.0f}ms "
            f"{r.ratio:7.3f} {r.overhead_ms:8.1f}ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
