"""The pure kernel: typed goal state and its transitions.

``decide(state, proposal, now)`` turns a proposal into events or raises a typed
error; ``evolve``/``fold`` turn events into :class:`GoalState`; ``audit`` says
whether a goal may close. Nothing here does I/O, reads the clock or draws
random numbers, so every function can be replayed from the event log.
"""

from turnkeeper.kernel import events, model, proposals
from turnkeeper.kernel._todo_rules import dependency_met
from turnkeeper.kernel.audit import Blocker, BlockerKind, TerminalAudit, audit
from turnkeeper.kernel.decide import decide, decide_and_evolve
from turnkeeper.kernel.events import (
    EVENT_SCHEMA_VERSIONS,
    GOAL_EVENT_ADAPTER,
    GOAL_EVENT_LIST_ADAPTER,
    GoalEvent,
)
from turnkeeper.kernel.evolve import evolve, fold
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
    "decide",
    "decide_and_evolve",
    "dependency_met",
    "detect_triggers",
    "events",
    "evolve",
    "fold",
    "model",
    "parse_proposal",
    "pending_triggers",
    "proposals",
]
