"""When a running host is hung: no progress for the silence timeout.

Progress is either of:

* a host event other than a non-fatal ``error`` (Codex prints "Reconnecting… 2/5"
  errors while it cannot reach its model: an agent that only says it is failing is
  not working);
* CPU in the turn's process tree: at least :data:`MIN_CPU_SHARE` of one CPU over a
  sample interval (hosts/tree_cpu.py). A long silent build or test run is work, not a
  hang.

The CPU is sampled only once the host has been quiet for a sample interval (a quarter
of the timeout, between :data:`MIN_SAMPLE_SECONDS` and :data:`MAX_SAMPLE_SECONDS`), so
a turn that keeps talking, or ends within the interval, never reads ``/proc`` for it.
The first sample after progress is a baseline; each later one is judged on what the
tree used since the one before. A tree that cannot be seen (another machine's, no
``/proc``) counts as busy: a host is never called hung on CPU that was not measured.

:class:`SilenceWatch` is bookkeeping with the time passed in, so its rule is tested
without a host; the turn driver's pump asks it after every event or wake-up, and waits
for the host's next event no longer than :meth:`SilenceWatch.wait_seconds`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from turnkeeper.host_reports import HostEvent

# The share of one CPU the tree must use over a sample interval to count as working.
MIN_CPU_SHARE: Final = 0.05
# Bounds of the sample interval: long enough to measure 5% in 10 ms clock ticks, short
# enough that a hang is found within a few percent of the timeout.
MIN_SAMPLE_SECONDS: Final = 0.5
MAX_SAMPLE_SECONDS: Final = 30.0
# How much of the last error's message a hung turn's message quotes.
_ERROR_CHARS: Final = 200


def is_progress(event: HostEvent) -> bool:
    """Whether ``event`` shows the host working: anything but a non-fatal error."""
    return event.kind != "error" or event.data.get("fatal") is True


class SilenceWatch:
    """Whether a host made progress within ``timeout`` seconds, and why not."""

    def __init__(self, timeout: float, cpu: Callable[[], float | None], *, now: float) -> None:
        """``cpu``: CPU seconds the tree used since its previous call (None: the tree
        cannot be seen); ``now``: the monotonic time the host started."""
        self._timeout = timeout
        self._interval = min(max(timeout / 4, MIN_SAMPLE_SECONDS), MAX_SAMPLE_SECONDS)
        self._cpu = cpu
        self._last_progress = now
        self._next_sample = now + self._interval
        # When the last sample was taken; None: the next one is a baseline.
        self._sampled_at: float | None = None
        self._errors = 0  # non-fatal errors since the last progress
        self._last_error = ""

    @property
    def timeout(self) -> float:
        return self._timeout

    def saw(self, event: HostEvent, now: float) -> None:
        """The host printed ``event`` at ``now``."""
        if not is_progress(event):
            self._errors += 1
            self._last_error = str(event.data.get("message", ""))[:_ERROR_CHARS]
            return
        self._last_progress = now
        self._errors = 0
        # The CPU is judged afresh from the next quiet interval on.
        self._sampled_at = None
        self._next_sample = now + self._interval

    def wait_seconds(self, now: float) -> float:
        """How long the pump may wait for an event before it must look again."""
        due = min(self._next_sample, self._last_progress + self._timeout)
        return max(0.0, due - now)

    def expired(self, now: float) -> str | None:
        """None while the host made progress within the timeout; else what was seen
        (the hung turn's message)."""
        if now >= self._next_sample or now - self._last_progress >= self._timeout:
            self._sample(now)
        if now - self._last_progress < self._timeout:
            return None
        what = "no event and no CPU"
        if self._errors:
            what = f"only error events and no CPU (last: {self._last_error!r})"
        return f"no progress for {self._timeout:g} s: {what}"

    def _sample(self, now: float) -> None:
        used = self._cpu()
        since = self._sampled_at
        self._next_sample = now + self._interval
        if used is None:  # not measurable: never a hang on that account
            self._last_progress = now
            self._sampled_at = None
            return
        self._sampled_at = now
        if since is not None and now > since and used >= MIN_CPU_SHARE * (now - since):
            self._last_progress = now
