"""Seeing a run as a user does: ``logs -f``, ``turn list|show``, ``run``'s progress.

* an agent prints a line, thinks for three seconds, prints another: ``logs -f``
  shows the first line while the turn is still running, and ends by itself when
  the run does;
* a failed turn names its real reason in ``turn show`` and in ``run``'s line, not
  only its error kind (a scripted agent with no matching turn; a command that says
  why on stderr and exits 3);
* ``run --json`` with several sessions at once: every line is one JSON object, with
  a record per turn phase and agent message, a ``host_silent`` warning, and the
  summary last;
* turn ids resolve from a unique prefix; an ambiguous or unknown one is refused;
* ``run`` to a file writes one plain line per record; ``run`` on a terminal draws its
  live table and prints every turn's lines above it.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import time
from datetime import datetime
from typing import Any

from tests.usage.project import UserProject, turnkeeper_executable, wait_for

RESULT = json.dumps({"kind": "result", "data": {"summary": "done", "todo_done": True}})


def _message(text: str) -> str:
    return json.dumps({"kind": "message", "data": {"text": text}})


def _session(project: UserProject, goal: str, todos: list[str], config: dict[str, Any]) -> str:
    project.tk("goal", "add", f"goal {goal}", "--id", goal)
    for todo in todos:
        project.tk("todo", "add", goal, f"do {todo}", "--id", todo)
    created = project.tk_json(
        "session", "create", goal, "--host", config.pop("host", "subprocess"),
        "--host-config", project.host_config(f"host-{goal}", config), "--workspace", ".",
    )  # fmt: skip
    return str(created["session_id"])


def _thinking_agent(project: UserProject, name: str, seconds: float = 3.0) -> str:
    """Prints a line, thinks ``seconds`` — and on until ``<name>.go`` exists, when a test
    made one (at most a minute): a slow machine cannot end the turn before the test
    has looked — then prints another line and its result."""
    go = project.root.parent / f"{name}.go"
    script = f"""#!/bin/sh
echo '{_message(f"{name}: first line")}'
sleep {seconds}
if [ -e '{go}.wanted' ]; then
  n=0; while [ ! -e '{go}' ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
fi
echo '{_message(f"{name}: second line")}'
echo '{RESULT}'
"""
    return str(project.agent(name, script))


def test_logs_follow_shows_a_line_while_the_turn_still_runs(user_project: UserProject) -> None:
    agent = _thinking_agent(user_project, "thinker")
    go = user_project.root.parent / "thinker.go"
    go.with_name("thinker.go.wanted").touch()
    sid = _session(user_project, "g", ["t1"], {"command": [agent], "event_format": "jsonl"})
    run = user_project.start("run", "--json")
    wait_for(
        lambda: user_project.tk_json("session", "show", sid)["in_flight"] is not None,
        timeout=60,
        what="the turn in flight",
    )
    follow = user_project.start("logs", sid[:8], "-f")
    wait_for(lambda: "thinker: first line" in follow.stdout(), timeout=30, what="the first line")
    # The line is on screen while its turn is still running: not completed, no result.
    turns = user_project.tk_json("turn", "list", sid)["turns"]
    assert [t["outcome"] for t in turns] == ["in_flight"], turns
    assert "thinker: second line" not in follow.stdout()
    assert run.proc.poll() is None

    go.touch()  # the agent goes on: its second line, its result
    assert run.wait() == 0, run.output()
    # The session is no longer driven: the follow ends by itself, with every line.
    assert follow.wait(timeout=30) == 0, follow.output()
    shown = follow.stdout()
    assert shown.index("thinker: first line") < shown.index("thinker: second line"), shown
    assert turns[0]["turn_id"] in shown
    # Everything again, as JSON lines, and from a position on.
    lines = [json.loads(ln) for ln in user_project.tk("logs", sid, "--json").stdout.splitlines()]
    assert [e["kind"] for e in lines] == ["message", "message", "result"], lines
    after = lines[0]["stream_seq"]
    later = user_project.tk("logs", sid, "--json", "--since", str(after)).stdout.splitlines()
    assert [json.loads(ln)["data"].get("text") for ln in later] == ["thinker: second line", None]


def test_a_failed_turn_names_its_real_reason(user_project: UserProject) -> None:
    # A scripted agent whose script has no turn for this todo fails it (exit code 2).
    scripted = _session(user_project, "s", ["t1"], {"host": "scripted", "script": {"turns": []}})
    done = user_project.tk("run", "--session", scripted, "--max-turns", "1")
    assert "no scripted turn matches" in done.stdout, done.stdout

    turns = user_project.tk_json("turn", "list", scripted)["turns"]
    assert [(t["outcome"], t["error_kind"]) for t in turns] == [("failed", "exit_code")], turns
    turn_id = turns[0]["turn_id"]
    assert "no scripted turn matches" in turns[0]["reason"]
    shown = user_project.tk("turn", "show", turn_id[: len("turn-") + 6]).stdout
    assert "no scripted turn matches turn" in shown, shown
    assert "exit_code" in shown and "Receipt" in shown and "accepted" in shown
    detail = user_project.tk_json("turn", "show", turn_id)
    assert detail["receipt"]["outcome"] == "failure"
    assert "no scripted turn matches" in detail["receipt"]["message"]
    steps = [step["phase"] for step in detail["phases"]]
    assert steps == ["accepted", "host_started", "receipt", "failed"], detail["phases"]
    assert detail["envelope"]["instructions"]  # what the agent was asked

    # A command that says why on stderr (and its progress on stdout), then exits 3.
    script = "#!/bin/sh\necho 'checking the database'\necho 'database is locked' >&2\nexit 3\n"
    failing = user_project.agent("failing", script)
    plain = _session(user_project, "p", ["p1"], {"command": [str(failing)]})
    done = user_project.tk("run", "--session", plain, "--max-turns", "1", "--json")
    failed = [r for r in map(json.loads, done.stdout.splitlines()) if r.get("phase") == "failed"]
    assert len(failed) == 1, done.stdout
    assert failed[0]["error_kind"] == "exit_code"
    assert "database is locked" in failed[0]["reason"], failed
    assert "database is locked" in failed[0]["progress"]
    shown = user_project.tk("turn", "show", failed[0]["turn"]).stdout
    assert "host exited with code 3" in shown and "checking the database" in shown, shown
    # The receipt itself names the cause the host gave on stderr, so every reader of
    # the turn (turn show --json, the API, a later run) sees it, not only this run.
    receipt = user_project.tk_json("turn", "show", failed[0]["turn"])["receipt"]
    assert "host exited with code 3; stderr: database is locked" in receipt["message"], receipt


def test_run_json_lines_all_parse_with_sessions_at_once(user_project: UserProject) -> None:
    names = ["a", "b", "c"]
    sids = {}
    for name in names:
        agent = _thinking_agent(user_project, f"agent-{name}", 1.5)
        config = {"command": [agent], "event_format": "jsonl"}
        sids[name] = _session(user_project, name, [f"{name}1"], config)
    done = user_project.tk("run", "--json", "--silence-warning", "0.5", timeout=120)

    records = [json.loads(line) for line in done.stdout.splitlines()]  # every line parses
    summary = records[-1]
    assert summary["stops"] == {sid: "goal_terminal" for sid in sids.values()}, summary
    progress = records[:-1]
    assert all(isinstance(r["progress"], str) and "record" in r for r in progress), progress
    for name, sid in sids.items():
        mine = [r for r in progress if r.get("session") == sid]
        phases = [r["phase"] for r in mine if r["record"] == "turn"]
        assert phases == ["started", "completed"], mine
        completed = next(r for r in mine if r.get("phase") == "completed")
        assert completed["elapsed_seconds"] >= 1.0 and completed["todo"] == f"{name}1"
        messages = [r["text"] for r in mine if r["record"] == "message"]
        assert messages == [f"agent-{name}: first line", f"agent-{name}: second line"], mine
        silent = [r for r in mine if r["record"] == "host_silent"]
        assert silent and silent[0]["silent_seconds"] >= 0.5, mine
        assert silent[0]["progress"].startswith(f"{name}1: no output from the host for ")
        assert {r["record"] for r in mine} <= {"session", "turn", "message", "host_silent"}

    # Turn ids from a prefix: unique resolves, shared is ambiguous, none is not found.
    turn_ids = sorted(r["turn"] for r in progress if r.get("phase") == "completed")
    shown = user_project.tk_json("turn", "show", turn_ids[0][:-2])
    assert shown["turn_id"] == turn_ids[0]
    refused = user_project.tk("turn", "show", "turn-", "--json", expect=3)
    error = json.loads(refused.stdout)["error"]
    assert (error["code"], error["reason"]) == ("INVALID_ARGUMENT", "ambiguous_id"), error
    assert sorted(error["details"]["candidates"]) == turn_ids
    missing = user_project.tk("turn", "show", "turn-nosuchturn", expect=4)
    assert "NOT_FOUND" in missing.stderr and "turn_not_found" in missing.stderr


def test_run_lines_to_a_pipe_are_one_record_each_and_show_escapes(
    user_project: UserProject,
) -> None:
    # What ``turnkeeper run > run.log`` writes: no terminal, so plain lines, written as
    # they are: a long agent message stays on its line (no wrap at 80 columns), its
    # escape sequence shows as text and its markup is printed as typed.
    long_words = " ".join(f"word{i}" for i in range(40))
    hostile = "\x1b[31mred\x1b[0m [bold]not bold[/bold]"
    lines = [_message(long_words), _message(hostile), RESULT]
    script = "#!/bin/sh\n" + "".join(f"echo '{line}'\n" for line in lines)
    sids = [
        _session(user_project, name, [f"{name}1"], {
            "command": [str(user_project.agent(f"talker-{name}", script))],
            "event_format": "jsonl",
        })
        for name in ("a", "b")
    ]  # fmt: skip
    done = user_project.tk("run", timeout=120)

    out = done.stdout
    assert "\x1b" not in out, repr(out)
    progress = [line for line in out.splitlines() if line.startswith("> ")]
    for sid in sids:
        assert any(sid[:8] in line for line in progress), out
    said = [line for line in progress if "word0" in line]
    assert len(said) == 2 and all(long_words in line for line in said), out
    shown = [line for line in progress if "not bold" in line]
    assert len(shown) == 2, out
    assert all("\\x1b[31mred\\x1b[0m [bold]not bold[/bold]" in line for line in shown), out


def _on_a_terminal(project: UserProject, *args: str, timeout: float = 120) -> tuple[int, str]:
    """``turnkeeper ARGS`` with a terminal (a pseudo-terminal) as its stdin, stdout and
    stderr, as a user types it: its exit code and what it drew (escapes removed)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*turnkeeper_executable(), *args],
        cwd=project.root,
        env=project.env(COLUMNS="120", LINES="40", TERM="xterm-256color"),
        stdin=follower,
        stdout=follower,
        stderr=follower,
        start_new_session=True,
    )
    os.close(follower)
    drawn = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if not ready:
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the command closed the terminal's last end
                break
            if not chunk:
                break
            drawn += chunk
        code = proc.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn.decode(errors="replace"))
    return code, text.replace("\r", "")


def test_run_on_a_terminal_prints_every_turn_above_its_live_table(
    user_project: UserProject,
) -> None:
    # Lines above the live table are printed in batches by its ticker: none may be
    # lost, and those still waiting when the run ends are printed before its summary.
    sids = {}
    for name in ("a", "b"):
        script = "#!/bin/sh\n" + f"echo '{_message(f'{name} says hello')}'\necho '{RESULT}'\n"
        config = {"command": [str(user_project.agent(f"tty-{name}", script))]}
        sids[name] = _session(user_project, name, [f"{name}1", f"{name}2"], {
            **config, "event_format": "jsonl",
        })  # fmt: skip
    code, drawn = _on_a_terminal(user_project, "run")

    assert code == 0, drawn
    assert "latest message" in drawn, drawn  # the live table was drawn
    for name, sid in sids.items():
        for todo in (f"{name}1", f"{name}2"):
            assert re.search(rf"> {todo}: turn turn-\w+ completed in", drawn), drawn
        assert f"session {sid[:8]}: stopped (goal_terminal" in drawn, drawn
    summary = drawn.index("ran 4 turns (0 failed)")
    assert drawn.rindex("> ") < summary, drawn


def test_run_into_head_stops_when_head_has_read_enough(user_project: UserProject) -> None:
    # ``turnkeeper run --json | head -n 3``, through a real shell: once ``head`` exits,
    # the next line ``run`` writes finds the pipe closed. It says so once on stderr,
    # with no traceback, lets the turn in flight end durably and starts no new one.
    agent = _thinking_agent(user_project, "slow", 0.5)
    todos = [f"t{i}" for i in range(6)]
    sid = _session(user_project, "g", todos, {"command": [agent], "event_format": "jsonl"})
    command = " ".join([*turnkeeper_executable(), "run", "--json"])
    shell = f'{command} 2>run.err | head -n 3 > head.out; echo "$PIPESTATUS" > status.out'
    subprocess.run(
        ["bash", "-c", shell], cwd=user_project.root, env=user_project.env(), timeout=120,
        check=True,
    )  # fmt: skip
    root = user_project.root
    assert len((root / "head.out").read_text().splitlines()) == 3
    assert (root / "status.out").read_text().split() == ["0"]
    errors = (root / "run.err").read_text()
    assert "Traceback" not in errors, errors
    assert errors.count("the output's reader has gone") == 1, errors
    # The run stopped early, and cleanly: no turn in flight, not every todo worked on.
    shown = user_project.tk_json("session", "show", sid)
    assert shown["in_flight"] is None, shown
    turns = user_project.tk_json("turn", "list", sid)["turns"]
    assert 1 <= len(turns) < len(todos), turns
    assert {t["outcome"] for t in turns} == {"completed"}, turns


def test_a_silent_host_shows_its_process_within_a_second(user_project: UserProject) -> None:
    # A host's start is journaled with the turn's next write (its first events, its
    # receipt), or alone once it has been silent for a second: an agent that thinks
    # for long before printing anything still shows in ``session show`` as started,
    # with its process, while it thinks.
    go = user_project.root.parent / "silent.go"
    script = f"""#!/bin/sh
n=0; while [ ! -e '{go}' ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
echo '{RESULT}'
"""
    agent = user_project.agent("silent", script)
    sid = _session(user_project, "g", ["t1"], {"command": [str(agent)], "event_format": "jsonl"})
    run = user_project.start("run", "--json")

    def started() -> bool:
        in_flight = user_project.tk_json("session", "show", sid)["in_flight"]
        return in_flight is not None and in_flight["phase"] == "host_started"

    wait_for(started, timeout=60, what="the silent host's start in the journal")
    in_flight = user_project.tk_json("session", "show", sid)["in_flight"]
    pid = in_flight["process"]["pid"]
    assert os.path.exists(f"/proc/{pid}"), in_flight  # the host still thinks
    go.touch()
    assert run.wait() == 0, run.output()
    detail = user_project.tk_json("turn", "show", in_flight["envelope"]["turn_id"])
    phases = {step["phase"]: datetime.fromisoformat(step["at"]) for step in detail["phases"]}
    assert list(phases)[:3] == ["accepted", "host_started", "receipt"], detail["phases"]
    # Journaled a second on, dated when the host started: before its receipt.
    assert phases["accepted"] <= phases["host_started"] < phases["receipt"], phases


def test_run_summary_to_a_pipe_keeps_a_long_reason_on_its_line(
    user_project: UserProject,
) -> None:
    # A session stopped by its operator while `run` drives it ends run's summary with
    # the controller that took it over: a long reason, still one line a session.
    agent = _thinking_agent(user_project, "slow", seconds=60)
    sid = _session(user_project, "s", ["s1"], {"command": [agent], "event_format": "jsonl"})
    run = user_project.start("run", env={"COLUMNS": "80"})
    wait_for(
        lambda: "slow: first line" in user_project.tk("logs", sid).stdout,
        60,
        "the agent's first line",
    )
    user_project.tk("session", "stop", sid, "--reason", "the operator needs the machine")
    assert run.wait() == 0, run.output()
    summary = run.stdout().splitlines()
    last = summary[-1]
    assert last.startswith(f"  session {sid[:8]}: lease_lost (stale_lease: ctl:"), summary
    assert last.endswith(")"), summary
    assert summary[-2] == "ran 1 turn (0 failed)", summary
