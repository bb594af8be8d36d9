"""Back pressure: the journal of a turn holds at most its cap of unacknowledged
events / bytes; a turn left at the cap without acks is ended (runner_backpressure);
acks let it go on."""

from __future__ import annotations

from tests.runner.conftest import Project, gone, wait_until
from turnkeeper.hosts import HostStatus
from turnkeeper.hosts.base import TurnLimits

# Host-side caps far above the runner's: what is bounded here is the runner's doing.
WIDE = TurnLimits(max_events=1_000_000, max_output_bytes=256 * 1024 * 1024)
PAD = "x" * 1000


def _settings(events: int, size: int, seconds: float) -> dict[str, str]:
    return {
        "TURNKEEPER_RUNNER_MAX_UNACKED_EVENTS": str(events),
        "TURNKEEPER_RUNNER_MAX_UNACKED_BYTES": str(size),
        "TURNKEEPER_RUNNER_BACKPRESSURE_SECONDS": str(seconds),
    }


def test_a_turn_at_the_event_cap_without_acks_is_ended(project: Project) -> None:
    project.runner(**_settings(20, 64 * 1024 * 1024, 1.5))
    request = project.request(limits=WIDE)
    # 5 MB of output, as fast as the shell prints it.
    config = project.config(n=5000, delay=0, PAD=PAD)
    with project.client() as client:
        identity = client.start_turn("subprocess", config, request)
        end = client.outcome(request.turn_id, timeout=60)
        journaled = list(client.events(request.turn_id, follow=False))
        journal_bytes = client.hello().journal_bytes
    assert end.end_reason == "runner_backpressure"
    assert end.outcome.status is HostStatus.FAILED
    assert end.outcome.message.startswith("runner_backpressure: ")
    assert end.outcome.last_seq == 20
    assert [e.seq for e in journaled] == list(range(1, 21))
    assert gone(identity.pid, identity.start_time)
    assert journal_bytes < 2 * 1024 * 1024  # far from the 5 MB the host printed


def test_the_byte_cap_bounds_the_journal_too(project: Project) -> None:
    cap = 50 * 1024
    project.runner(**_settings(1_000_000, cap, 1.0))
    request = project.request(limits=WIDE)
    config = project.config(n=5000, delay=0, PAD=PAD)
    with project.client() as client:
        client.start_turn("subprocess", config, request)
        end = client.outcome(request.turn_id, timeout=60)
        journaled = list(client.events(request.turn_id, follow=False))
    assert end.end_reason == "runner_backpressure"
    size = sum(len(e.model_dump_json()) for e in journaled)
    assert cap - 1100 <= size <= cap  # filled to the cap, never past it
    assert end.outcome.last_seq == len(journaled)


def test_acks_release_a_paused_turn(project: Project) -> None:
    project.runner(**_settings(10, 64 * 1024 * 1024, 30.0))
    request = project.request(limits=WIDE)
    n = 100
    with project.client() as client:
        client.start_turn("subprocess", project.config(n=n, delay=0), request)
        stream = client.events(request.turn_id)
        first = [next(stream) for _ in range(10)]
        assert [e.seq for e in first] == list(range(1, 11))

        def paused() -> bool:
            info = client.turn(request.turn_id)
            return info.state == "live" and info.last_seq == 10

        wait_until(paused, what="the turn to wait at the cap")
        seen = [e.seq for e in first]
        client.ack(request.turn_id, 10)
        for event in stream:
            seen.append(event.seq)
            client.ack(request.turn_id, event.seq)
        end = client.outcome(request.turn_id, timeout=30)
    assert seen == list(range(1, n + 2))
    assert end.end_reason is None
    assert end.outcome.status is HostStatus.SUCCEEDED
    assert end.outcome.last_seq == n + 1
