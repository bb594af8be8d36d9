"""Shared helpers for the crash-recovery suite (``tests/runtime/test_crash_*.py``).

The suite drives the REAL control plane: ``turnkeeper run --json`` as a subprocess,
with ``TURNKEEPER_DIR`` pointing at a throwaway project and, for the run that is
meant to die, ``TURNKEEPER_CRASH_AT=<point>[@<n>]`` in its environment (the process
SIGKILLs itself there, see :mod:`turnkeeper.crashpoints`). The agent is the
``scripted`` host, a real subprocess that appends one line per run to
``<host state>/runs.jsonl``: that file is the oracle for "how often did the host run".

The modules: :mod:`.scripts` (the standard goal, its todos and the agent's turns),
:mod:`.project` (a project and the factory that cleans up after it),
:mod:`.databases` (the backends a project's store can be on: SQLite, PostgreSQL),
:mod:`.processes` (the CLI, and the hosts found by their turn marker),
:mod:`.turn_log` (each accepted turn as the session's log tells it),
:mod:`.invariants` (what every scenario must end with) and :mod:`.scenarios`
(running a module's scenarios side by side, on one backend or on each).
Everything a test needs is importable from this package.
"""

from tests.runtime.crash_support.databases import BACKENDS, POSTGRESQL, SQLITE
from tests.runtime.crash_support.invariants import (
    RunSnapshot,
    assert_every_turn_terminal,
    assert_finished_intact,
    assert_goal_completed,
    assert_host_never_rerun,
    assert_left_paused_mid_turn,
    assert_store_consistent,
    assert_written_back_once,
    snapshot,
)
from tests.runtime.crash_support.processes import (
    MARKER_ENV,
    CliResult,
    kill_marked_processes,
    live_marked_processes,
    wait_until,
)
from tests.runtime.crash_support.project import (
    CrashProject,
    ProjectFactory,
    _git,
    make_project,
    project_factory,
)
from tests.runtime.crash_support.scenarios import (
    run_side_by_side,
    run_side_by_side_on_backends,
    scenario_pool,
    selected_cases,
    selected_params,
)
from tests.runtime.crash_support.scripts import (
    CONTENT_A,
    CONTENT_B,
    CRASH_PAUSED_ON_T2,
    EVIDENCE_A,
    EVIDENCE_B,
    FILE_A,
    FILE_B,
    GOAL_ID,
    HOST_EVENTS_PAUSED_BATCH_ON_T2,
    PAUSED_LAST_SEQ,
    TITLE_A,
    TITLE_B,
    TODO_A,
    TODO_B,
    bound_then_silent_turn,
    fault_turn,
    paused_on_t2_script,
    paused_turn,
    standard_script,
    write_turn,
)
from tests.runtime.crash_support.turn_log import Record, TurnHistory, turn_histories

__all__ = [
    "BACKENDS",
    "CONTENT_A",
    "CONTENT_B",
    "CRASH_PAUSED_ON_T2",
    "EVIDENCE_A",
    "EVIDENCE_B",
    "FILE_A",
    "FILE_B",
    "GOAL_ID",
    "HOST_EVENTS_PAUSED_BATCH_ON_T2",
    "MARKER_ENV",
    "PAUSED_LAST_SEQ",
    "POSTGRESQL",
    "SQLITE",
    "TITLE_A",
    "TITLE_B",
    "TODO_A",
    "TODO_B",
    "CliResult",
    "CrashProject",
    "ProjectFactory",
    "Record",
    "RunSnapshot",
    "TurnHistory",
    "_git",
    "assert_every_turn_terminal",
    "assert_finished_intact",
    "assert_goal_completed",
    "assert_host_never_rerun",
    "assert_left_paused_mid_turn",
    "assert_store_consistent",
    "assert_written_back_once",
    "bound_then_silent_turn",
    "fault_turn",
    "kill_marked_processes",
    "live_marked_processes",
    "make_project",
    "paused_on_t2_script",
    "paused_turn",
    "project_factory",
    "run_side_by_side",
    "run_side_by_side_on_backends",
    "scenario_pool",
    "selected_cases",
    "selected_params",
    "snapshot",
    "standard_script",
    "turn_histories",
    "wait_until",
    "write_turn",
]
