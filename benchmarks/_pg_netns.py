"""Workers on machines of their own: each in a network namespace, over a veth link.

On one host, K workers on loopback share it with the server, and a round trip costs
no more than a context switch. Here each worker runs under ``ip netns exec`` in a
namespace of its own, joined to this one by a veth pair (``10.N.k.1`` on this side,
``10.N.k.2`` inside, ``N`` drawn per run), and reaches the database through its link:
the server is a throwaway cluster of the benchmark's own (tests/pg_cluster.py),
listening on loopback (for the benchmark) and on the first link's address, which every
namespace reaches by its default route. The shared server is never touched.
Namespaces, links and the cluster are removed at the end, whatever happened.

Needs root, ``ip`` and PostgreSQL 15's binaries; :func:`why_not` says what is missing.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks._common import Say, add_columns
from benchmarks._pg_fleet import FleetPoint, run_fleet

IP_TIMEOUT_S = 30


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=IP_TIMEOUT_S)


@dataclass(frozen=True)
class Machine:
    name: str  # the namespace
    host: str  # this side's address of its link
    inside: str
    link: str

    def under(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]


@contextmanager
def machines(count: int) -> Iterator[list[Machine]]:
    """``count`` namespaces, each on a veth link of its own; all removed after."""
    tag = secrets.token_hex(3)
    net = 175 + secrets.randbelow(75)  # 10.175-249.*; the tests' namespaces take 10.100-174.*
    made: list[Machine] = []
    try:
        for k in range(1, count + 1):
            name, link = f"tkb-{tag}-{k}", f"tkb{tag}{k}"
            host, inside = f"10.{net}.{k}.1", f"10.{net}.{k}.2"
            _ip("netns", "add", name)
            made.append(Machine(name, host, inside, link))
            _ip("link", "add", f"{link}a", "type", "veth", "peer", "name", f"{link}b")
            _ip("link", "set", f"{link}b", "netns", name)
            _ip("addr", "add", f"{host}/30", "dev", f"{link}a")
            _ip("link", "set", f"{link}a", "up")
            inner = ["netns", "exec", name, "ip"]
            _ip(*inner, "addr", "add", f"{inside}/30", "dev", f"{link}b")
            _ip(*inner, "link", "set", f"{link}b", "up")
            _ip(*inner, "link", "set", "lo", "up")
            _ip(*inner, "route", "add", "default", "via", host)
        yield made
    finally:
        for machine in made:
            subprocess.run(
                ["ip", "link", "del", f"{machine.link}a"],
                check=False,
                capture_output=True,
                timeout=IP_TIMEOUT_S,
            )
            subprocess.run(
                ["ip", "netns", "del", machine.name],
                check=False,
                capture_output=True,
                timeout=IP_TIMEOUT_S,
            )


def why_not() -> str | None:
    """Why workers cannot be put in namespaces here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "ip is missing"
    from tests.pg_cluster import available

    return available()


def run_netns_fleet(
    work: Path, workers: tuple[int, ...], sessions: int, todos: int, repeats: int, say: Say
) -> dict[str, list[FleetPoint]]:
    """For each K of ``workers``, K workers each in a namespace of its own, on a fresh
    database of a throwaway cluster; ``repeats`` times, the order reversed every other."""
    from tests.pg_cluster import running_cluster

    out: dict[str, list[FleetPoint]] = {str(k): [] for k in workers}
    with machines(max(workers)) as links:
        first = links[0].host
        with running_cluster(listen=("127.0.0.1", first)) as cluster:
            server = cluster.url()
            for repeat in range(repeats):
                order = list(workers) if repeat % 2 == 0 else list(reversed(workers))
                for k in order:
                    name = f"tk_netns_w{k}_{repeat}"
                    url = cluster.create_database(name, host=first)
                    say(
                        f"2n. {k} worker(s), each in a namespace of its own, {sessions} "
                        f"sessions (repeat {repeat + 1})"
                    )
                    point = run_fleet(
                        work / f"netns-{k}-{repeat}",
                        server,
                        name,
                        url,
                        k,
                        sessions,
                        todos,
                        say,
                        under=[m.under() for m in links[:k]],
                    )
                    out[str(k)].append(point)
                    say(
                        f"    {point.turns_per_s:,.1f} turns/s; CPU cores: workers "
                        f"{point.workers_cores:.2f}, hosts {point.hosts_cores:.2f}, database "
                        f"{point.database_cores:.2f}, machine {point.machine_busy_cores:.2f}; "
                        f"workers {point.workers_cpu_ms_per_turn:.2f} ms/turn, database "
                        f"{point.database_cpu_ms_per_turn:.2f} ms/turn; {point.limit} "
                        f"({point.why})"
                    )
    return out


def render_netns(fleet: dict[str, list[FleetPoint]], console: Console) -> None:
    netns = Table(title="the same, each worker in a network namespace of its own")
    add_columns(
        netns, "workers", "turns/s", "vs 1", "workers CPU", "hosts CPU", "database CPU",
        "machine busy", "workers ms/turn", "DB ms/turn", "xacts/turn", "limit",
    )  # fmt: skip
    for key, points in fleet.items():
        for p in points:
            netns.add_row(
                key, f"{p.turns_per_s:,.1f}", f"{p.ratio_to_one:.2f}x",
                f"{p.workers_cores:.2f}", f"{p.hosts_cores:.2f}",
                f"{p.database_cores:.2f}", f"{p.machine_busy_cores:.2f}",
                f"{p.workers_cpu_ms_per_turn:.2f}", f"{p.database_cpu_ms_per_turn:.2f}",
                f"{p.database_xacts_per_turn:.1f}", f"{p.limit}: {p.why}",
            )  # fmt: skip
    console.print(netns)
