"""The pure kernel: typed goal state and its transitions.

``decide_goal(state, proposal, now)`` turns a proposal into events or raises a typed
error; ``evolve_goal``/``fold_goal`` turn events into :class:`GoalState`; ``audit``
says whether a goal may close. The session kernel (``kernel/session``) says the same
of a session: ``decide_session``, ``evolve_session``, ``fold_session``. Nothing here
does I/O, reads the clock or draws random numbers, so every function can be replayed
from the event log.
"""

from turnkeeper.kernel import events, model, proposals
from turnkeeper.kernel._todo_rules import dependency_met
from turnkeeper.kernel.audit import Blocker, BlockerKind, TerminalAudit, audit
from turnkeeper.kernel.decide import decide_and_evolve, decide_goal
from turnkeeper.kernel.events import (
    EVENT_SCHEMA_VERSIONS,
    GOAL_EVENT_ADAPTER,
    GOAL_EVENT_LIST_ADAPTER,
    GoalEvent,
)
from turnkeeper.kernel.evolve import evolve_goal, fold_goal
from turnkeeper.kernel.model import GoalState
from turnkeeper.kernel.proposals import GOAL_PROPOSAL_ADAPTER, GoalProposal, parse_proposal
from turnkeeper.kernel.replan import TriggerHit, detect_triggers, pending_triggers

__all__ = [
    "EVENT_SCHEMA_VERSIONS",
    "GOAL_EVENT_ADAPTER",
    "GOAL_EVENT_LIST_ADAPTER",
    "GOAL_PROPOSAL_ADAPTER",
    "Blocker",
    "BlockerKind",
    "GoalEvent",
    "GoalProposal",
    "GoalState",
    "TerminalAudit",
    "TriggerHit",
    "audit",
    "decide_and_evolve",
    "decide_goal",
    "dependency_met",
    "detect_triggers",
    "events",
    "evolve_goal",
    "fold_goal",
    "model",
    "parse_proposal",
    "pending_triggers",
    "proposals",
]
