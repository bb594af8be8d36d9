"""The pure kernel: typed goal state and its transitions.

``decide_goal(state, proposal, now)`` turns a proposal into events or raises a typed
error; ``evolve_goal``/``fold_goal`` turn events into :class:`GoalState`; ``audit``
says whether a goal may close. The session kernel (``kernel/session``) says the same
of a session: ``decide_session``, ``evolve_session``, ``fold_session``. Nothing here
does I/O, reads the clock or draws random numbers, so every function can be replayed
from the event log.
"""

from importlib import import_module
from typing import TYPE_CHECKING

# The state and its audit, imported now: what every reader of a goal needs. (And
# ``audit`` names the function, as it always did, not the module of the same name: a
# submodule imported later would replace a name not yet bound here.)
from turnkeeper.kernel.audit import Blocker, BlockerKind, TerminalAudit, audit
from turnkeeper.kernel.model import GoalState

# Every other name is imported from its module when first asked for (PEP 562): a
# reader that only decodes and audits goals (``status``) never imports the events,
# the proposals and the decisions (~6% of ``status``'s instructions at 1,000
# sessions). The imports below are what type checkers see; ``_LAZY`` is the same
# table for the interpreter (tests/kernel/test_lazy_package.py keeps the two equal).
if TYPE_CHECKING:
    from turnkeeper.kernel import events, model, proposals
    from turnkeeper.kernel._todo_rules import dependency_met
    from turnkeeper.kernel.decide import decide_and_evolve, decide_goal
    from turnkeeper.kernel.events import (
        EVENT_SCHEMA_VERSIONS,
        GOAL_EVENT_ADAPTER,
        GOAL_EVENT_LIST_ADAPTER,
        GoalEvent,
    )
    from turnkeeper.kernel.evolve import evolve_goal, fold_goal
    from turnkeeper.kernel.proposals import GOAL_PROPOSAL_ADAPTER, GoalProposal, parse_proposal
    from turnkeeper.kernel.replan import TriggerHit, detect_triggers, pending_triggers

_LAZY: dict[str, str] = {
    **dict.fromkeys(("events", "model", "proposals"), ""),  # the submodules themselves
    "dependency_met": "_todo_rules",
    **dict.fromkeys(("decide_and_evolve", "decide_goal"), "decide"),
    **dict.fromkeys(
        ("EVENT_SCHEMA_VERSIONS", "GOAL_EVENT_ADAPTER", "GOAL_EVENT_LIST_ADAPTER", "GoalEvent"),
        "events",
    ),
    **dict.fromkeys(("evolve_goal", "fold_goal"), "evolve"),
    **dict.fromkeys(("GOAL_PROPOSAL_ADAPTER", "GoalProposal", "parse_proposal"), "proposals"),
    **dict.fromkeys(("TriggerHit", "detect_triggers", "pending_triggers"), "replan"),
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found = import_module(f"{__name__}.{module or name}")
    value = found if not module else getattr(found, name)
    globals()[name] = value  # asked for once
    return value


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
