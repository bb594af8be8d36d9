"""How ``run`` shows what it does: a live table on a terminal, lines otherwise, and one
JSON object per line with ``--json`` (runtime/turn/run_progress.py makes the records).

Records come from every session's thread at once: one lock makes each line whole.
Lines that go to a file or a pipe are written as they are, one record a line: Rich's
markup, highlighting and wrapping would style nothing there, cut long lines at 80
columns, and cost a turn about a millisecond of the controller's CPU (two lines a
turn), a quarter of what the rest of the turn costs.
A ticker thread, alive exactly as long as the run, looks for silent hosts every
second (and redraws the live table); it is stopped and joined when the run ends.
Above the live table, lines are printed by the ticker, those of the last quarter
second at once: each print redraws the whole table, and printing each record as it
came doubled the controller's CPU a turn (three redraws a turn).
When the output's reader goes away (``run --json | head``), the run stops as after a
first Ctrl-C — the turns in flight reach their durable end, no new one starts — and
says so on stderr once; what it would still have printed is dropped, not raised.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, Literal

from rich.live import Live
from rich.table import Table

from turnkeeper.cli.output import console, safe, visible
from turnkeeper.runtime.turn.run_progress import RunRecord, duration

if TYPE_CHECKING:
    from turnkeeper.runtime.turn.run_progress import RunMonitor

Mode = Literal["json", "live", "lines"]
# What ``json.dumps(..., default=str)`` writes, without building an encoder per line
# (dumps reuses its own only when called with no options). It keeps no state between
# calls, so one serves every thread.
_JSON: Final = json.JSONEncoder(default=str)
# How often silent hosts are looked for, at most (a shorter silence limit looks
# more often).
TICK_SECONDS: Final = 1.0
# How long a line waits above the live table before it is printed, at most.
LIVE_LINES_SECONDS: Final = 0.25
_JOIN_SECONDS: Final = 5.0


def pick_mode(as_json: bool) -> Mode:
    if as_json:
        return "json"
    return "live" if console.is_terminal and sys.stdout.isatty() else "lines"


class RunDisplay:
    def __init__(self, mode: Mode, silence_seconds: float) -> None:
        self.mode = mode
        # Lines with no terminal to style them (see the module's docstring); a console
        # told to act as a terminal (FORCE_COLOR) still gets Rich's.
        self._plain = mode == "lines" and not console.is_terminal
        self._silence = silence_seconds
        self._lock = threading.Lock()
        self._monitor: RunMonitor | None = None
        self._live: Live | None = None
        self._waiting: list[str] = []  # live mode: lines the ticker prints next
        # Called once if the output's reader goes away (``run`` stops the controller).
        self.on_reader_gone: Callable[[], None] | None = None
        self.reader_gone = False

    # --- records -------------------------------------------------------------------------

    def report(self, record: RunRecord) -> None:
        """Show one record (from any thread)."""
        with self._lock:
            if self.reader_gone:
                return
            try:
                self._show(record)
            except BrokenPipeError:
                self._reader_went()

    def _show(self, record: RunRecord) -> None:
        """Write one record as the mode says (lock held)."""
        if self.mode == "json":
            sys.stdout.write(_JSON.encode(record.as_json()) + "\n")
            sys.stdout.flush()
        elif self.mode == "live" and record.record == "message":
            pass  # the live table shows each session's latest message
        elif self._live is not None:
            self._waiting.append(f"[dim]>[/] {safe(record.text)}")
        elif self._plain:
            sys.stdout.write(f"> {visible(record.text)}\n")
            sys.stdout.flush()
        else:
            console.print(f"[dim]>[/] {safe(record.text)}")

    def _reader_went(self) -> None:
        """The pipe's reader closed it: stop writing to it, and ask the run to stop.

        Standard output is pointed at /dev/null, so neither the records still to come
        nor the interpreter's flush at exit raise on the closed pipe again."""
        self.reader_gone = True
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, sys.stdout.fileno())
        finally:
            os.close(null)
        sys.stderr.write(
            "turnkeeper: the output's reader has gone; stopping after the turns in flight "
            "reach their durable end\n"
        )
        if self.on_reader_gone is not None:
            self.on_reader_gone()

    def note(self, text: str) -> None:
        """A line that is no session's (what a first Ctrl-C waits for)."""
        self.report(RunRecord("note", text))

    # --- the live table and the ticker ------------------------------------------------------

    @contextmanager
    def showing(self, monitor: RunMonitor) -> Iterator[None]:
        """Look for silent hosts (and, on a terminal, draw the running hosts) while the
        body runs."""
        self._monitor = monitor
        stop = threading.Event()
        live = None
        if self.mode == "live":
            live = Live(
                get_renderable=self._table,
                console=console,
                refresh_per_second=2,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            live.start()
        self._live = live
        ticker = threading.Thread(target=self._tick, args=(stop,), name="run-display", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join(_JOIN_SECONDS)
            with self._lock:
                self._live = None  # a record from now on is printed at once
                self._print_waiting()
            if live is not None:
                live.stop()

    def _tick(self, stop: threading.Event) -> None:
        interval = min(TICK_SECONDS, max(self._silence / 4, 0.05))
        wake = min(interval, LIVE_LINES_SECONDS) if self.mode == "live" else interval
        monitor = self._monitor
        next_check = time.monotonic() + interval
        # Ends when the run does (``stop`` is set on the way out of ``showing``).
        while not stop.wait(wake):
            if self.mode == "live":
                with self._lock:
                    self._print_waiting()
            if monitor is not None and time.monotonic() >= next_check:
                next_check = time.monotonic() + interval
                monitor.check_silence()

    def _print_waiting(self) -> None:
        """Print the lines waiting above the live table, with one redraw (lock held)."""
        if self._waiting:
            console.print("\n".join(self._waiting))
            self._waiting.clear()

    def _table(self) -> Table:
        table = Table(box=None, show_header=True, header_style="bold", expand=False)
        for column in ("session", "todo", "turn", "elapsed", "events"):
            table.add_column(column, overflow="ellipsis", no_wrap=True, min_width=len(column))
        # The message takes what the other columns leave.
        table.add_column("latest message", overflow="ellipsis", no_wrap=True, ratio=1)
        monitor = self._monitor
        running = monitor.running() if monitor is not None else []
        now = time.monotonic()
        for turn in running:
            table.add_row(
                safe(turn.session_id[:8]),
                safe(turn.label),
                safe(f"{turn.kind} {turn.turn_id}"),
                duration(turn.elapsed(now)),
                str(turn.events),
                safe(" ".join((turn.message or "-").split())[:120]),
            )
        if not running:
            table.add_row("-", "-", "no host running", "-", "-", "-")
        return table
