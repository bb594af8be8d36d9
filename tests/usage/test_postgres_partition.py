"""Two workers as on two machines — separate network and PID namespaces — sharing one
PostgreSQL, and one of them cut off from the database mid-turn for longer than its lease.

The machines are simulated the way containers are made: each worker runs under
``ip netns exec <its namespace> unshare --pid --fork --mount-proc``, so it reaches the
database only over its own veth link and sees only its own processes (the other
worker's pids mean nothing to it, and no death of the other can be proven from here).
The cut is a blackhole route to the database inside the first worker's namespace: its
packets vanish, nothing answers and nothing resets, as when a cable is pulled.

What must happen (runtime/turn/fencing.py, docs/postgresql.md):

* the cut-off worker ends its agent before its lease runs out (self-fencing);
* the other worker takes the session over only after the lease and the fencing margin,
  records the turn lost as ended by its worker's fencing (not "no live host process",
  which it could not know), and finishes the todo in a retry;
* the cut-off agent wrote nothing to the workspace after the takeover began;
* once the link is back, the cut-off worker's late writes are refused by the lease's
  fencing: nothing it writes lands in the session's stream after the takeover.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.pg_cluster import PgCluster, available, running_cluster
from tests.usage.project import Background, wait_for
from tests.usage.test_postgres_workers import WorkersProject
from turnkeeper import Project
from turnkeeper.errors import Aborted
from turnkeeper.kernel.session import (
    LeaseAcquired,
    LeaseRenewed,
    LeaseToken,
    ReleaseLease,
    TurnAccepted,
    TurnLost,
)
from turnkeeper.runtime.services.sessions import SESSION_CODEC, SessionService, session_stream
from turnkeeper.store import open_store
from turnkeeper_chaos.service import CountingService

pytestmark = pytest.mark.timeout(240)

LEASE = 8.0  # seconds; the fencing margin is a quarter of it (runtime/turn/fencing.py)
MARGIN = LEASE / 4

# The agent: its first run writes a line into the workspace every 0.1 s for 30 s (far
# longer than the lease), logging each write's time outside the workspace; a retry
# writes once and finishes. Either ends by completing its todo with evidence.
AGENT = r"""#!/bin/sh
set -eu
runs="$1"
turn="$TURNKEEPER_TURN_ID"
if [ -e "$runs/first" ]; then
  echo "retry $turn" >> work.txt
else
  touch "$runs/first"
  i=0
  while [ "$i" -lt 300 ]; do
    echo "first $turn $i" >> work.txt
    date +%s.%N >> "$runs/$turn.writes"
    sleep 0.1
    i=$((i + 1))
  done
fi
evidence='{"key": "written", "command": "test -s work.txt"}'
printf '{"kind": "result", "data": {"todo_done": true, "evidence": [%s]}}\n' "$evidence"
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class Machine:
    """A network namespace joined to this one by a veth pair: ``host`` is this side's
    address (where the database listens for it), ``name`` the namespace."""

    name: str
    host: str
    inside: str
    link: str

    def run_here(self) -> list[str]:
        """A command prefix: run in this namespace, in a PID namespace of its own (its
        processes see only each other; they die with its first process)."""
        return [
            "ip", "netns", "exec", self.name,
            "unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM",
        ]  # fmt: skip

    def cut(self, database: str) -> None:
        _ip("netns", "exec", self.name, "ip", "route", "add", "blackhole", f"{database}/32")

    def heal(self, database: str) -> None:
        _ip("netns", "exec", self.name, "ip", "route", "del", "blackhole", f"{database}/32")


class Network:
    """Two machines on links of their own; every namespace and link removed after."""

    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        # 10.100-174.*: the benchmarks' namespaces take 10.175-249.*, so the two never
        # share a subnet when the suite's workers run them side by side.
        net = 100 + secrets.randbelow(75)
        self.machines: list[Machine] = []
        try:
            for k in (1, 2):
                name, link = f"tk-{tag}-m{k}", f"tk{tag}{k}"
                host, inside = f"10.{net}.{k}.1", f"10.{net}.{k}.2"
                _ip("netns", "add", name)
                self.machines.append(Machine(name, host, inside, link))
                _ip("link", "add", f"{link}a", "type", "veth", "peer", "name", f"{link}b")
                _ip("link", "set", f"{link}b", "netns", name)
                _ip("addr", "add", f"{host}/30", "dev", f"{link}a")
                _ip("link", "set", f"{link}a", "up")
                inner = ["netns", "exec", name, "ip"]
                _ip(*inner, "addr", "add", f"{inside}/30", "dev", f"{link}b")
                _ip(*inner, "link", "set", f"{link}b", "up")
                _ip(*inner, "link", "set", "lo", "up")
                _ip(*inner, "route", "add", "default", "via", host)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for machine in self.machines:
            subprocess.run(
                ["ip", "link", "del", f"{machine.link}a"], check=False, capture_output=True
            )
            subprocess.run(["ip", "netns", "del", machine.name], check=False, capture_output=True)


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is missing"
    return available()


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    why = _why_not()
    if why is not None:
        if os.environ.get("TURNKEEPER_REQUIRE_POSTGRES", "") == "1":
            pytest.fail(f"cannot simulate two machines: {why}", pytrace=False)
        pytest.skip(f"cannot simulate two machines: {why}")
    made = Network()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def cluster(network: Network) -> Iterator[PgCluster]:
    with running_cluster(listen=("127.0.0.1", *(m.host for m in network.machines))) as made:
        yield made


def stop(worker: Background) -> None:
    """SIGTERM the worker itself: ``unshare`` (the process we started) ignores it while
    it waits, so it goes to unshare's one child, the worker, by its pid here. The
    worker's PID namespace ends with it, and unshare with that."""
    pid = worker.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    os.kill(int(children[0]), signal.SIGTERM)


def _events(url: str, sid: str) -> list[tuple[datetime, Any]]:
    store = open_store(url)
    try:
        records = store.read_stream(session_stream(sid))
    finally:
        store.close()
    return [(r.recorded_at, SESSION_CODEC.decode_event(r)) for r in records]


def _writes(runs: Path, turn_id: str) -> list[float]:
    path = runs / f"{turn_id}.writes"
    return [float(line) for line in path.read_text().split()] if path.exists() else []


def test_a_cut_off_worker_ends_its_agent_before_the_other_takes_over(
    network: Network, cluster: PgCluster, tmp_path: Path
) -> None:
    m1, m2 = network.machines
    url = cluster.create_database(f"tk_partition_{uuid.uuid4().hex[:8]}", host=m1.host)
    with CountingService() as service:
        project = WorkersProject(tmp_path, url, service)
        try:
            _run(project, m1, m2, url)
        finally:
            project.close()
            with contextlib.suppress(subprocess.CalledProcessError):
                m1.heal(m1.host)  # if the test failed while it was cut


def _run(project: WorkersProject, m1: Machine, m2: Machine, url: str) -> None:
    sid, goal = _make_session(project)
    w1, first_turn, cut_at = _cut_mid_turn(project, m1, m2, url, sid, goal)
    _check(project, url, sid, w1, first_turn, cut_at)


def _make_session(project: WorkersProject) -> tuple[str, str]:
    agent = project.base / "slow-agent.sh"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    workspace = project.base / "site"
    project._git_repo(workspace)
    with Project.open(project.root) as api:
        goal = api.goals.add("write the site").goal.id
        api.todos.add(goal, "write work.txt", requires_evidence=["written"])
        sid = api.sessions.create(
            goal,
            host="subprocess",
            host_config={"command": [str(agent), str(project.runs)], "event_format": "jsonl"},
            workspace=workspace,
        ).session_id
    return sid, goal


def _cut_mid_turn(
    project: WorkersProject, m1: Machine, m2: Machine, url: str, sid: str, goal: str
) -> tuple[Background, str, float]:
    """w1 runs the turn, is cut off, w2 takes over and finishes; both stopped after."""
    lease = ("--lease", str(LEASE), "--max-sessions", "1")
    w1 = project.worker(*lease, prefix=m1.run_here())
    wait_for(lambda: any(project.runs.glob("*.writes")), 60, "the first agent to write")
    first_turn = next(project.runs.glob("*.writes")).name.removesuffix(".writes")
    w2 = project.worker(*lease, prefix=m2.run_here())
    time.sleep(1.0)  # w2 is scanning: it sees a live lease and leaves the session alone
    m1.cut(m1.host)
    cut_at = time.time()

    def taken_over() -> bool:
        owners = {e.owner for _, e in _events(url, sid) if isinstance(e, LeaseAcquired)}
        return len(owners) >= 2

    try:
        wait_for(taken_over, 60, "the second worker to take the session over", interval=0.5)
    except AssertionError as late:
        raise AssertionError(f"{late}\n--- w1\n{w1.output()}\n--- w2\n{w2.output()}") from None
    # The link comes back soon after the takeover: whatever w1 still had in flight
    # now reaches the database, and must be refused.
    time.sleep(2.0)
    m1.heal(m1.host)

    def done() -> bool:
        with Project.open(project.root) as api:
            return all(t.status == "done" for t in api.todos.list(goal))

    wait_for(done, 60, "the todo to be done", interval=0.5)
    time.sleep(3.0)  # the first worker, back on the network, meets the fenced lease
    for worker in (w1, w2):
        stop(worker)
    for worker in (w1, w2):
        assert worker.wait(timeout=60) == 0, worker.output()
    return w1, first_turn, cut_at


def _check(
    project: WorkersProject, url: str, sid: str, w1: Background, first_turn: str, cut_at: float
) -> None:
    events = _events(url, sid)
    acquired = [(at, e) for at, e in events if isinstance(e, LeaseAcquired)]
    (_, first), (took_at, second) = acquired[0], acquired[-1]
    assert first.owner != second.owner and len({e.owner for _, e in acquired}) == 2
    # 1. The agent was ended before the takeover began: its last write (this machine's
    # clock, the database's too) precedes the successor's lease by the margin.
    writes = _writes(project.runs, first_turn)
    assert writes, "the first agent wrote"
    last_write = writes[-1]
    assert last_write < took_at.timestamp(), (last_write, took_at)
    assert last_write < cut_at + LEASE, "ended by the fence, within a lease of the cut"
    assert len(writes) < 250, "the first agent did not run to its end"
    # 2. The record says what happened: the turn lost, ended by its worker's fencing.
    lost = [e for _, e in events if isinstance(e, TurnLost)]
    assert [e.turn_id for e in lost] == [first_turn]
    assert lost[0].proof.ended == "fenced", lost[0].proof
    assert "fencing" in lost[0].proof.detail
    fenced = [line for line in w1.json_lines() if line.get("event") == "fenced"]
    assert fenced and fenced[0]["turn"] == first_turn, w1.output()
    # Taken over only once the lease and the margin had passed.
    assert took_at >= first_expiry(events, first.owner), "taken over early"
    # 3. The retry ran under the successor and finished the todo.
    accepted = [e.envelope for _, e in events if isinstance(e, TurnAccepted)]
    assert len(accepted) == 2 and accepted[0].turn_id == first_turn
    assert accepted[1].recovers_turn_id == first_turn
    work = (project.base / "site" / "work.txt").read_text().splitlines()
    assert work[-1] == f"retry {accepted[1].turn_id}", work[-3:]
    # 4. Late writes refused. Back on the network, the first worker found the session
    # held by the second and drove nothing more: nothing in the stream under its name
    # after the takeover, no turn planned by it after the cut. A write it could still
    # send under its old lease is fenced off (a release: what a closed session, as this
    # one now is, still accepts from its holder).
    after = [e for at, e in events if at > took_at and getattr(e, "owner", None) == first.owner]
    assert after == [], after
    planned = [r for r in w1.json_lines() if r.get("event") == "turn_planned"]
    assert len(planned) == 1, planned
    store = open_store(url)
    try:
        sessions = SessionService(store)
        stale = LeaseToken(owner=first.owner, epoch=first.epoch)
        with pytest.raises(Aborted) as refused:
            sessions.execute(sid, ReleaseLease(lease=stale))
        assert refused.value.reason == "stale_lease", refused.value
    finally:
        store.close()
    verified = project.tk("verify", "--json").stdout
    assert json.loads(verified)["ok"] is True, verified


def first_expiry(events: list[tuple[datetime, Any]], owner: str) -> datetime:
    """When the first owner's lease expired plus the fencing margin, as last renewed."""
    until = max(
        e.expires_at
        for _, e in events
        if isinstance(e, LeaseAcquired | LeaseRenewed) and e.owner == owner
    )
    return until + timedelta(seconds=MARGIN)
