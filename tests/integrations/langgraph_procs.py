"""The processes the LangGraph saver's tests start: ``python -m tests.integrations.langgraph_procs
ROLE ...``. Each prints one JSON line on stdout as its result.

* ``writer URL THREAD NAME DIR STEPS``: read the thread, say ready (``DIR/ready-NAME``),
  wait for ``DIR/go``, then chain STEPS checkpoints onto what it read; a refusal is
  reported with its code and reason.
* ``graph URL THREAD LOG MODE``: the approval graph below; MODE ``start`` runs it from
  the beginning, ``continue`` resumes it from its last checkpoint, ``resume:VALUE``
  answers its interrupt. Each node appends its name to LOG when it starts, so the test
  counts what ran; ``step2`` sleeps the first time it runs, long enough to be killed.
"""

from __future__ import annotations

import json
import operator
import sys
import time
from pathlib import Path
from typing import Annotated, TypedDict, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointMetadata, empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt

from turnkeeper.errors import TurnkeeperError
from turnkeeper.integrations.langgraph import TurnkeeperSaver

WAIT_S = 30.0


def writer(url: str, thread: str, name: str, folder: Path, steps: int) -> dict[str, object]:
    written = 0
    with TurnkeeperSaver.from_url(url) as saver:
        config: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        latest = saver.get_tuple(config)
        if latest is not None:
            config = latest.config
        (folder / f"ready-{name}").touch()
        deadline = time.monotonic() + WAIT_S
        while not (folder / "go").exists():
            if time.monotonic() > deadline:
                return {"name": name, "written": 0, "error": "no go signal"}
            time.sleep(0.005)
        try:
            for step in range(steps):
                checkpoint = empty_checkpoint()
                metadata = cast(CheckpointMetadata, {"writer": name, "step": step})
                config = saver.put(config, checkpoint, metadata, {})
                written += 1
        except TurnkeeperError as error:
            return {"name": name, "written": written, "code": error.code, "reason": error.reason}
    return {"name": name, "written": written}


class Approval(TypedDict):
    log: Annotated[list[str], operator.add]
    answer: str


def approval_graph(
    saver: TurnkeeperSaver, trace: Path
) -> CompiledStateGraph[Approval, None, Approval, Approval]:
    def ran(node: str) -> None:
        with trace.open("a") as out:
            out.write(node + "\n")

    def step1(state: Approval) -> dict[str, object]:
        ran("step1")
        return {"log": ["step1"]}

    def step2(state: Approval) -> dict[str, object]:
        first_time = "step2" not in trace.read_text().split()
        ran("step2")
        if first_time:
            time.sleep(WAIT_S)  # the test kills the process here, between steps
        return {"log": ["step2"]}

    def ask(state: Approval) -> dict[str, object]:
        ran("ask")
        answer = interrupt({"question": "ship it?", "log": state["log"]})
        return {"log": [f"answered:{answer}"], "answer": str(answer)}

    def finish(state: Approval) -> dict[str, object]:
        ran("finish")
        return {"log": [f"done:{state['answer']}"]}

    graph = StateGraph(Approval)
    graph.add_node("step1", step1)
    graph.add_node("step2", step2)
    graph.add_node("ask", ask)
    graph.add_node("finish", finish)
    graph.add_edge(START, "step1")
    graph.add_edge("step1", "step2")
    graph.add_edge("step2", "ask")
    graph.add_edge("ask", "finish")
    graph.add_edge("finish", END)
    return graph.compile(checkpointer=saver)


class Chat(TypedDict):
    messages: Annotated[list[str], operator.add]


def conversation(saver: TurnkeeperSaver) -> CompiledStateGraph[Chat, None, Chat, Chat]:
    """One node that answers every message with "ok": a conversation that grows."""

    def reply(state: Chat) -> dict[str, object]:
        return {"messages": ["ok"]}

    graph = StateGraph(Chat)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    graph.add_edge("reply", END)
    return graph.compile(checkpointer=saver)


def run_graph(url: str, thread: str, trace: Path, mode: str) -> dict[str, object]:
    with TurnkeeperSaver.from_url(url) as saver:
        graph = approval_graph(saver, trace)
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        # "sync": each step's checkpoint is durable before the next step starts (the
        # default, "async", writes it beside the next step: a kill may lose the last one).
        if mode == "start":
            graph.invoke({"log": ["start"], "answer": ""}, config, durability="sync")
        elif mode == "continue":
            graph.invoke(None, config, durability="sync")
        else:
            answer: Command[str] = Command(resume=mode.removeprefix("resume:"))
            graph.invoke(answer, config, durability="sync")
        state = graph.get_state(config)
        return {"values": dict(state.values), "next": list(state.next)}


def main(argv: list[str]) -> None:
    role = argv[0]
    if role == "writer":
        url, thread, name, folder, steps = argv[1:]
        result = writer(url, thread, name, Path(folder), int(steps))
    elif role == "graph":
        url, thread, trace, mode = argv[1:]
        result = run_graph(url, thread, Path(trace), mode)
    else:
        raise SystemExit(f"unknown role {role!r}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])


def fan_out(saver: TurnkeeperSaver) -> CompiledStateGraph[Chat, None, Chat, Chat]:
    """Two branches in one step, then a join: parallel tasks writing at once."""

    def left(state: Chat) -> dict[str, object]:
        return {"messages": ["left"]}

    def right(state: Chat) -> dict[str, object]:
        return {"messages": ["right"]}

    def join(state: Chat) -> dict[str, object]:
        return {"messages": [f"joined {len(state['messages'])}"]}

    graph = StateGraph(Chat)
    graph.add_node("left", left)
    graph.add_node("right", right)
    graph.add_node("join", join)
    graph.add_edge(START, "left")
    graph.add_edge(START, "right")
    graph.add_edge(["left", "right"], "join")
    graph.add_edge("join", END)
    return graph.compile(checkpointer=saver)
