"""Operator signals: ``/metrics`` figures move as real turns run; each turn that ends
while the server runs becomes OpenTelemetry spans carrying its turn id."""

from __future__ import annotations

import re
import time

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import ApiProject
from turnkeeper.api.telemetry import TurnSpans
from turnkeeper.server.app import create_app

_SAMPLE = re.compile(r"^([a-z_]+)(\{[^}]*\})? (\S+)$")


def scrape(project: ApiProject) -> dict[str, float]:
    answer = project.client.get("/metrics", headers=project.headers())
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    samples: dict[str, float] = {}
    for line in answer.text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return samples


def test_metrics_change_as_turns_run(api_project: ApiProject) -> None:
    project = api_project
    completed = 'turnkeeper_turns_total{kind="start",outcome="completed"}'
    before = scrape(project)
    assert before.get(completed, 0) == 0
    assert before['turnkeeper_sessions{status="ready"}'] == 1
    assert before["turnkeeper_lease_takeovers_total"] == 0
    project.run_turns(1)
    after = scrape(project)
    assert after[completed] == 1
    assert after['turnkeeper_turn_duration_seconds_count{kind="start"}'] == 1
    assert after['turnkeeper_turn_duration_seconds_sum{kind="start"}'] > 0
    assert after['turnkeeper_turn_duration_seconds_bucket{kind="start",le="+Inf"}'] == 1
    project.run_turns(1)  # the second todo, then the goal passes its audit
    later = scrape(project)
    assert later[completed] == 2
    assert later['turnkeeper_turn_duration_seconds_count{kind="start"}'] == 2
    assert (
        later['turnkeeper_sessions{status="ready"}'] + later['turnkeeper_sessions{status="closed"}']
        == 1
    )
    # A stop while another owner holds the lease is a takeover.
    other = project.new_session("create-2")
    from turnkeeper.runtime.control.controller import Controller

    # A live lease of another controller (a run elsewhere).
    Controller(project.store, owner="ctl:elsewhere:b:p:1:1").acquire(other)
    stopped = project.client.post(f"/v1/sessions/{other}/stop", headers=project.headers())
    assert stopped.status_code == 200, stopped.text
    assert scrape(project)["turnkeeper_lease_takeovers_total"] == 1
    assert scrape(project)['turnkeeper_sessions{status="suspended"}'] == 1


def test_each_turn_that_ends_is_a_span_with_its_turn_id(api_project: ApiProject) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    project = api_project
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = create_app(project.store, project.root, spans=TurnSpans(provider))
    with TestClient(app):  # runs the app's lifespan: its poller reads the log
        time.sleep(2.5)  # its first round: the history it starts on, not replayed
        project.run_turns(1)
        turn_id = project.client.get(
            f"/v1/sessions/{project.session_id}/turns", headers=project.headers()
        ).json()["turns"][0]["turn_id"]
        deadline = time.monotonic() + 20
        while not [s for s in exporter.get_finished_spans() if s.name == "turnkeeper.turn"]:
            assert time.monotonic() < deadline, "no span for the turn"
            time.sleep(0.1)
    spans = exporter.get_finished_spans()
    (turn,) = [s for s in spans if s.name == "turnkeeper.turn"]
    assert turn.attributes is not None
    assert turn.attributes["turnkeeper.turn_id"] == turn_id
    assert turn.attributes["turnkeeper.outcome"] == "completed"
    phases = [s for s in spans if s.parent is not None and s.parent.span_id == turn.context.span_id]
    names = [s.name for s in sorted(phases, key=lambda s: s.start_time or 0)]
    assert names == [
        "turnkeeper.turn.host_started",
        "turnkeeper.turn.receipt",
        "turnkeeper.turn.written_back",
        "turnkeeper.turn.completed",
    ]
    assert all(s.attributes and s.attributes["turnkeeper.turn_id"] == turn_id for s in phases)
    assert turn.start_time is not None and turn.end_time is not None
    assert turn.start_time < turn.end_time
