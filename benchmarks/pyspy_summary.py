"""Where a ``turnkeeper run`` process spends its CPU: a ``py-spy record -f raw --threads``
profile summarised by turnkeeper function.

py-spy is run with ``--gil``: it samples the thread holding the GIL, so the samples
are where the interpreter's time goes (a thread blocked in a wait, a read, a lock or
an fsync has released it). Each line of its raw output is one stack,
``thread (TID): NAME;frame;...;frame COUNT``, a frame being ``function (file:line)``.
Three views of the same samples:

* **self** — the innermost turnkeeper frame of each stack: the turnkeeper function
  whose work (its own and the libraries it called) the CPU was doing;
* **inclusive** — every turnkeeper function on the stack, once per stack: the share
  of CPU spent in it and everything below it;
* **leaf** — the module of the innermost frame (``subprocess``, ``pydantic``, ...),
  whatever called it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^():]*):\d+\)$")
_PACKAGE = "turnkeeper/"


@dataclass
class Profile:
    samples: int = 0  # with a Python stack: the shares below are of these
    rate_hz: int = 0
    # Samples of a thread with no Python frame (the interpreter starting or ending, or
    # a C call py-spy could not see into): counted, left out of the shares.
    frameless: int = 0
    # (function, share of samples): the largest first.
    self_by_function: list[tuple[str, float]] = field(default_factory=list)
    inclusive_by_function: list[tuple[str, float]] = field(default_factory=list)
    by_leaf_module: list[tuple[str, float]] = field(default_factory=list)

    @property
    def cpu_s(self) -> float:
        return self.samples / self.rate_hz if self.rate_hz else 0.0

    def as_json(self) -> dict[str, Any]:
        def rows(pairs: list[tuple[str, float]]) -> list[dict[str, Any]]:
            return [{"function": name, "share": round(share, 4)} for name, share in pairs]

        return {
            "samples": self.samples,
            "frameless_samples": self.frameless,
            "rate_hz": self.rate_hz,
            "cpu_s": round(self.cpu_s, 3),
            "self_by_turnkeeper_function": rows(self.self_by_function),
            "inclusive_by_turnkeeper_function": rows(self.inclusive_by_function),
            "by_leaf_module": [
                {"module": name, "share": round(share, 4)} for name, share in self.by_leaf_module
            ],
        }


def _frame(text: str) -> tuple[str, str]:
    """(function, file) of one frame; a frame without a file is its own name."""
    match = _FRAME.match(text)
    if match is None:
        return text, ""
    return match["function"], match["file"]


def _leaf_module(file: str, function: str) -> str:
    """``turnkeeper/runtime/driver``, or a library's top package (``pydantic``), or a
    standard module (``subprocess``); py-spy shortens paths below ``sys.path``."""
    if not file:
        return function
    if file.startswith(_PACKAGE):
        return file.removesuffix(".py")
    for prefix in ("site-packages/", "python3.11/"):
        if prefix in file:
            file = file.split(prefix, 1)[1]
    return file.split("/", 1)[0].removesuffix(".py")


def summarise(path: Path, rate_hz: int, top: int = 40) -> Profile:
    """The profile in ``path`` (py-spy's raw format), its ``top`` rows per view."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = frameless = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame(f) for f in stack.split(";")[1:]]  # the first is the thread
        if not frames:
            frameless += count
            continue
        total += count
        ours = [f"{fn} ({file})" for fn, file in frames if file.startswith(_PACKAGE)]
        own[ours[-1] if ours else "(outside turnkeeper: start-up, imports, threading)"] += count
        for name in set(ours):
            inclusive[name] += count
        leaves[_leaf_module(frames[-1][1], frames[-1][0])] += count
    if not total:
        return Profile(rate_hz=rate_hz, frameless=frameless)

    def shares(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(name, n / total) for name, n in counter.most_common(top)]

    return Profile(
        samples=total,
        rate_hz=rate_hz,
        frameless=frameless,
        self_by_function=shares(own),
        inclusive_by_function=shares(inclusive),
        by_leaf_module=shares(leaves),
    )


def render_pyspy(profile: dict[str, Any], console: Console, rows: int = 15) -> None:
    """The profile's three views (see the module's doc), ``rows`` lines each."""
    console.print(
        f"py-spy: {profile['samples']:,} samples of the thread holding the GIL "
        f"({profile['cpu_s']:.1f} s at {profile['rate_hz']} Hz; "
        f"{profile['frameless_samples']:,} more without a Python frame, left out)"
    )
    views = (
        ("self_by_turnkeeper_function", "function", "innermost turnkeeper function"),
        ("inclusive_by_turnkeeper_function", "function", "turnkeeper function, inclusive"),
        ("by_leaf_module", "module", "innermost frame's module"),
    )
    for key, name, title in views:
        table = Table(title=f"CPU by {title}")
        table.add_column(name)
        table.add_column("share", justify="right")
        for row in profile[key][:rows]:
            table.add_row(row[name], f"{row['share']:.1%}")
        console.print(table)
