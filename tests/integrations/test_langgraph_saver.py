"""``TurnkeeperSaver`` beyond the conformance suite: the write fence between real
processes, a real graph killed between steps and resumed by another process, deletes
as tombstones, values stored once per version, and ``turnkeeper verify`` folding the
saver's streams."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, CheckpointMetadata, empty_checkpoint
from langgraph.checkpoint.serde.types import ERROR

from tests.integrations.langgraph_procs import approval_graph, conversation, fan_out
from tests.pg import fresh_postgres_url
from turnkeeper.errors import Aborted, ErrorCode
from turnkeeper.integrations.langgraph import THREAD_KIND, TurnkeeperSaver, thread_stream_id
from turnkeeper.integrations.langgraph.log import REMOVED, new_event
from turnkeeper.project_api import Project
from turnkeeper.store import open_event_store

REPO = Path(__file__).resolve().parents[2]
PROCS = [sys.executable, "-m", "tests.integrations.langgraph_procs"]
TIMEOUT_S = 60


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "saver.db")
    return fresh_postgres_url()


def _config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _chain(saver: TurnkeeperSaver, thread: str) -> list[tuple[str, str | None, object]]:
    """(id, parent id, writer) of every checkpoint of the thread, newest first."""
    return [
        (
            t.checkpoint["id"],
            t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None,
            t.metadata.get("writer"),
        )
        for t in saver.list(_config(thread))
    ]


def _start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*PROCS, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def _wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_two_processes_on_one_thread_never_fork(store_url: str, tmp_path: Path) -> None:
    thread, steps = "shared", 15
    with TurnkeeperSaver.from_url(store_url) as saver:
        seeded = cast(CheckpointMetadata, {"writer": "seed"})
        seed = saver.put(_config(thread), empty_checkpoint(), seeded, {})
    procs = {
        name: _start(["writer", store_url, thread, name, str(tmp_path), str(steps)])
        for name in ("a", "b")
    }
    _wait_for(lambda: all((tmp_path / f"ready-{n}").exists() for n in procs), "both readers")
    (tmp_path / "go").touch()  # both read the same head; now both write at once
    results = {name: _result(proc) for name, proc in procs.items()}

    winners = [r for r in results.values() if r["written"] == steps and "code" not in r]
    losers = [r for r in results.values() if "code" in r]
    assert len(winners) == 1 and len(losers) == 1, results
    assert losers[0]["code"] == ErrorCode.ABORTED
    assert losers[0]["reason"] == "thread_write_conflict"
    # The loser wrote nothing: its first append found the head moved.
    assert losers[0]["written"] == 0
    with TurnkeeperSaver.from_url(store_url) as saver:
        chain = _chain(saver, thread)
    assert len(chain) == steps + 1
    # One line from the newest back to the seed: each checkpoint's parent is the next.
    for (_, parent, writer), (older, _, _) in itertools.pairwise(chain):
        assert parent == older
        assert writer == winners[0]["name"]
    assert chain[-1][0] == seed["configurable"]["checkpoint_id"]


def test_a_stale_writer_in_one_process_is_refused_until_it_reads(tmp_path: Path) -> None:
    url = str(tmp_path / "saver.db")
    with TurnkeeperSaver.from_url(url) as first, TurnkeeperSaver.from_url(url) as second:
        stored = first.put(_config("t"), empty_checkpoint(), {}, {})
        assert second.get_tuple(_config("t")) is not None  # second has read the thread
        first.put(stored, empty_checkpoint(), {}, {})
        with pytest.raises(Aborted) as refused:
            second.put(stored, empty_checkpoint(), {}, {})
        assert refused.value.reason == "thread_write_conflict"
        # Reading again brings it up to date; it writes after the latest checkpoint.
        latest = second.get_tuple(_config("t"))
        assert latest is not None
        second.put(latest.config, empty_checkpoint(), {}, {})
        assert len(list(first.list(_config("t")))) == 3


def test_a_write_after_delete_thread_is_refused_and_delete_is_a_tombstone(
    tmp_path: Path,
) -> None:
    url = str(tmp_path / "saver.db")
    with TurnkeeperSaver.from_url(url) as saver, TurnkeeperSaver.from_url(url) as other:
        stored = saver.put(_config("t"), empty_checkpoint(), {}, {})
        assert other.get_tuple(_config("t")) is not None
        saver.delete_thread("t")
        assert saver.get_tuple(_config("t")) is None
        # The deleter knows the thread is gone; the other saw it before the tombstone.
        for writer, reason in ((saver, "thread_deleted"), (other, "thread_write_conflict")):
            with pytest.raises(Aborted) as refused:
                writer.put(stored, empty_checkpoint(), {}, {})
            assert refused.value.reason == reason
        assert other.get_tuple(_config("t")) is None  # now it has read the tombstone
        with pytest.raises(Aborted) as refused:
            other.put_writes(stored, [("ch", 1)], "task")
        assert refused.value.reason == "thread_deleted"
    with open_event_store(url) as store:
        types = [e.type for e in store.read_stream(thread_stream_id("t"))]
    # Append-only: the checkpoint is still in the log, behind the tombstone.
    assert types == [
        "langgraph.thread_started",
        "langgraph.checkpoint",
        "langgraph.thread_deleted",
    ]


def test_each_channel_value_is_stored_once_per_version(tmp_path: Path) -> None:
    url, big = str(tmp_path / "saver.db"), "x" * 50_000
    with TurnkeeperSaver.from_url(url) as saver:
        config = _config("t")
        for step in range(30):
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"big": big, "counter": step}
            checkpoint["channel_versions"] = {"big": 1, "counter": step + 1}
            new: ChannelVersions = {"counter": step + 1}
            if step == 0:
                new["big"] = 1
            config = saver.put(config, checkpoint, {"step": step}, new)
        latest = saver.get_tuple(_config("t"))
        assert latest is not None
        assert latest.checkpoint["channel_values"] == {"big": big, "counter": 29}
    with open_event_store(url) as store:
        sizes = [len(e.payload) for e in store.read_stream(thread_stream_id("t"))]
    # The big value went into the log once; every later step is small and flat.
    assert sizes[1] > len(big)
    assert max(sizes[2:]) < 2_000
    assert max(sizes[2:]) - min(sizes[2:]) < 100


def test_pending_writes_are_idempotent_and_special_channels_replace(tmp_path: Path) -> None:
    with TurnkeeperSaver.from_url(str(tmp_path / "saver.db")) as saver:
        stored = saver.put(_config("t"), empty_checkpoint(), {}, {})
        saver.put_writes(stored, [("a", 1), ("b", 2)], "task-1")
        saver.put_writes(stored, [("a", 10), ("b", 20)], "task-1")  # a retried task
        saver.put_writes(stored, [(ERROR, "first")], "task-2")
        saver.put_writes(stored, [(ERROR, "second")], "task-2")
        head = saver.store.head(thread_stream_id("t"))
        saver.put_writes(stored, [("a", 1)], "task-1")  # nothing new: nothing appended
        assert saver.store.head(thread_stream_id("t")) == head
        found = saver.get_tuple(stored)
        assert found is not None
        assert found.pending_writes == [
            ("task-1", "a", 1),
            ("task-1", "b", 2),
            ("task-2", ERROR, "second"),
        ]


def _graph(args: list[str]) -> dict[str, object]:
    return _result(_start(["graph", *args]))


def test_a_killed_graph_resumes_in_a_new_process(store_url: str, tmp_path: Path) -> None:
    trace = tmp_path / "trace.log"
    trace.touch()
    first = _start(["graph", store_url, "job", str(trace), "start"])
    # step2 is running (it sleeps the first time): step1's checkpoint is committed.
    _wait_for(lambda: "step2" in trace.read_text().split(), "step2 to start")
    os.kill(first.pid, signal.SIGKILL)
    first.communicate(timeout=TIMEOUT_S)
    assert first.returncode == -signal.SIGKILL

    paused = _graph([store_url, "job", str(trace), "continue"])
    assert paused["next"] == ["ask"]
    done = _graph([store_url, "job", str(trace), "resume:yes"])
    assert done["next"] == []
    assert done["values"] == {
        "log": ["start", "step1", "step2", "answered:yes", "done:yes"],
        "answer": "yes",
    }
    # step1 ran once; step2 again after the kill; ask before and after its interrupt.
    assert trace.read_text().split() == ["step1", "step2", "step2", "ask", "ask", "finish"]

    with TurnkeeperSaver.from_url(store_url) as saver:
        graph = approval_graph(saver, trace)
        history = list(graph.get_state_history({"configurable": {"thread_id": "job"}}))
    # One unbroken line from the input to the end, newest first.
    assert [list(s.next) for s in history] == [
        [],
        ["finish"],
        ["ask"],
        ["step2"],
        ["step1"],
        ["__start__"],
    ]
    for newer, older in itertools.pairwise(history):
        assert newer.parent_config is not None
        assert (
            newer.parent_config["configurable"]["checkpoint_id"]
            == older.config["configurable"]["checkpoint_id"]
        )
    assert history[-1].parent_config is None


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    with Project.init(tmp_path) as opened:
        yield opened


def _verify(root: Path, command: str = "verify") -> tuple[int, dict[str, object]]:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "turnkeeper"), command, "--json"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    report: dict[str, object] = json.loads(done.stdout)
    return done.returncode, report


def test_verify_folds_the_savers_streams(project: Project) -> None:
    saver = TurnkeeperSaver.from_project(project)
    config = saver.put(_config("t"), empty_checkpoint(), {"run_id": "r1"}, {})
    saver.put_writes(config, [("a", 1)], "task")
    saver.put(config, empty_checkpoint(), {"run_id": "r2"}, {})
    saver.delete_for_runs(["r1"])
    code, report = _verify(project.root)
    assert code == 0 and report["ok"] is True, report

    # A projection that disagrees with the thread's events is caught.
    stream = thread_stream_id("t")
    wrong = json.dumps({"thread_id": "t", "deleted": False, "checkpoints": 99})
    head = project.store.head(stream)
    nothing_removed = new_event(REMOVED, {"checkpoints": [], "why": "prune"})
    project.store.append(stream, THREAD_KIND, head, [nothing_removed], wrong, 1)
    code, report = _verify(project.root)
    mismatches = report["mismatches"]
    assert code == 6 and isinstance(mismatches, list), report
    assert [(m["stream_id"], m["kind"]) for m in mismatches] == [(stream, "projection")]
    # repair folds the thread again and rewrites its projection; the saver reads on.
    code, _ = _verify(project.root, "repair")
    assert code == 0
    code, report = _verify(project.root)
    assert code == 0 and report["ok"] is True, report
    assert [t.metadata.get("run_id") for t in saver.list(_config("t"))] == ["r2"]


def test_verify_checks_a_savers_database_outside_any_project(tmp_path: Path) -> None:
    """``verify --database-url`` checks the database a saver keeps on its own (no
    project here), and names a database that does not exist instead of making one."""
    url = str(tmp_path / "checkpoints.db")
    with TurnkeeperSaver.from_url(url) as saver:
        saver.put(_config("t"), empty_checkpoint(), {"run_id": "r1"}, {})
    turnkeeper = str(Path(sys.executable).parent / "turnkeeper")

    def check(target: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [turnkeeper, "verify", "--database-url", target, "--json"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )

    for target in (url, f"sqlite:///{url}", "checkpoints.db"):
        done = check(target)
        report = json.loads(done.stdout)
        assert done.returncode == 0 and report["ok"] is True, done.stderr
        assert report["streams_checked"] == 1
    missing = check("absent.db")
    assert missing.returncode == 4, missing.stdout + missing.stderr
    assert "database_not_found" in missing.stdout + missing.stderr
    assert not (tmp_path / "absent.db").exists()


def test_a_growing_conversation_stores_what_each_step_added(tmp_path: Path) -> None:
    url, steps = str(tmp_path / "saver.db"), 40
    message = "m" * 1_000
    with TurnkeeperSaver.from_url(url) as saver:
        graph = conversation(saver)
        for turn in range(steps):
            graph.invoke({"messages": [f"{turn}:{message}"]}, _config("chat"))
        saver.copy_thread("chat", "copy")
        saver.prune(["chat"], strategy="keep_latest")
    with open_event_store(url) as store:
        events = store.read_stream(thread_stream_id("chat"))
    sizes = [len(e.payload) for e in events if e.type != REMOVED]
    # Each step stores its own message (and the reply), never the conversation so far.
    assert max(sizes) < 4 * len(message)
    with TurnkeeperSaver.from_url(url) as fresh:  # rebuilt from the log alone
        graph = conversation(fresh)
        latest = graph.get_state(_config("chat")).values["messages"]
        assert latest == [m for turn in range(steps) for m in (f"{turn}:{message}", "ok")]
        history = list(graph.get_state_history(_config("copy")))
        for snapshot in history:
            got = snapshot.values.get("messages", [])
            assert got == latest[: len(got)]
        # Every version of the conversation, from empty to the end, read back whole.
        assert {len(s.values.get("messages", [])) for s in history} == set(range(2 * steps + 1))
        # The prune left one checkpoint of the original, its values whole.
        assert len(list(fresh.list(_config("chat")))) == 1


def test_delete_for_runs_finds_every_thread_of_a_run_by_the_index(tmp_path: Path) -> None:
    url = str(tmp_path / "saver.db")
    with TurnkeeperSaver.from_url(url) as saver:
        first = saver.put(_config("t1"), empty_checkpoint(), {"run_id": "r1"}, {})
        saver.put(first, empty_checkpoint(), {"run_id": "r2"}, {})
        saver.copy_thread("t1", "t2")
        saver.put(_config("t3"), empty_checkpoint(), {"run_id": "r3"}, {})
    with TurnkeeperSaver.from_url(url) as fresh:  # nothing cached: the index finds them
        fresh.delete_for_runs(["r1"])
        for thread in ("t1", "t2"):
            assert [t.metadata["run_id"] for t in fresh.list(_config(thread))] == ["r2"]
        assert len(list(fresh.list(_config("t3")))) == 1
        head = fresh.store.head(thread_stream_id("t3"))
        fresh.delete_for_runs(["r1", "unknown"])  # nothing left of r1: nothing appended
        assert fresh.store.head(thread_stream_id("t3")) == head


def test_parallel_branches_through_the_async_api(store_url: str) -> None:
    async def run() -> tuple[list[str], list[int | None]]:
        with TurnkeeperSaver.from_url(store_url) as saver:
            graph = fan_out(saver)
            config = _config("fan")
            for turn in range(3):
                await graph.ainvoke({"messages": [f"in {turn}"]}, config)
            state = await graph.aget_state(config)
            steps = [(s.metadata or {}).get("step") async for s in graph.aget_state_history(config)]
            return state.values["messages"], steps

    messages, steps = asyncio.run(run())
    assert [m for m in messages if m.startswith(("in", "joined"))] == [
        "in 0", "joined 3", "in 1", "joined 7", "in 2", "joined 11",
    ]  # fmt: skip
    assert sorted(messages[1:3]) == ["left", "right"]
    # Four checkpoints a run (input, start, both branches, join), one unbroken history.
    assert steps == list(range(10, -2, -1))


def test_a_list_item_changed_in_place_is_stored_as_changed(tmp_path: Path) -> None:
    """A node may change an item of a list channel in place and append to it: the next
    checkpoint holds the changed item, not the one the earlier step stored."""
    url = str(tmp_path / "saver.db")
    item: dict[str, object] = {"text": "draft"}
    messages: list[object] = [item]
    with TurnkeeperSaver.from_url(url) as saver:
        config = _config("t")
        for step in (1, 2):
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"messages": list(messages)}
            checkpoint["channel_versions"] = {"messages": step}
            config = saver.put(config, checkpoint, {"step": step}, {"messages": step})
            item["text"] = "final"  # the same object, changed after it was stored
            messages.append({"text": f"reply {step}"})
    with TurnkeeperSaver.from_url(url) as fresh:  # rebuilt from the log alone
        found = fresh.get_tuple(config)
        assert found is not None
        assert found.checkpoint["channel_values"]["messages"] == [
            {"text": "final"},
            {"text": "reply 1"},
        ]
        first = [t for t in fresh.list(_config("t")) if t.metadata.get("step") == 1]
        assert first[0].checkpoint["channel_values"]["messages"] == [{"text": "draft"}]
