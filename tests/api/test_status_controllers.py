"""``GET /v1/status`` carries the running controllers' background threads, from the files
they keep under ``.turnkeeper/controllers/`` (runtime/control/controller_health.py):
a worker whose lease keeper cannot renew (a partition between it and the database
the server still reaches) is shown down, since when and why. A controller whose
process is gone is not shown."""

from __future__ import annotations

from tests.api.conftest import ApiProject
from turnkeeper.errors import Unavailable
from turnkeeper.runtime.control.controller_health import HealthFile
from turnkeeper.runtime.control.controller_identity import controller_owner
from turnkeeper.supervision import HealthRegistry, Supervised


def _idle(loop: Supervised) -> bool:
    return not loop.wait(0.05)


def test_status_shows_a_controllers_thread_that_is_down(api_project: ApiProject) -> None:
    answer = api_project.client.get("/v1/status", headers=api_project.headers())
    assert answer.status_code == 200 and answer.json()["controllers"] == []
    registry = HealthRegistry()
    state_dir = api_project.root / ".turnkeeper"
    health = HealthFile(state_dir, controller_owner(), "worker", registry=registry).open()
    keeper = Supervised("lease keeper", _idle, registry=registry)
    try:
        keeper.ensure_running()
        keeper.fault(Unavailable("connection to the database timed out"))
        answer = api_project.client.get("/v1/status", headers=api_project.headers())
        assert answer.status_code == 200, answer.text
        (controller,) = answer.json()["controllers"]
        assert controller["role"] == "worker" and controller["owner"] == controller_owner()
        (thread,) = controller["threads"]
        assert (thread["name"], thread["state"]) == ("lease keeper", "down")
        assert thread["down_since"] and "timed out" in thread["last_error"]
    finally:
        keeper.stop(10)
        health.close()
    answer = api_project.client.get("/v1/status", headers=api_project.headers())
    assert answer.json()["controllers"] == []  # its file went with its clean exit
