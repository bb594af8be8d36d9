"""Operator signals: ``/metrics`` figures move as real turns run. (Spans are made by
whoever runs a turn, not by the server: tests/runtime/test_turn_spans.py.)"""

from __future__ import annotations

import re

from tests.api.conftest import ApiProject

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
