"""Goals, todos, gates, monitors, evidence and the terminal audit.

Each write builds the kernel proposal the matching command builds, through the
Python API's services (``turnkeeper.project_api``: the same ``GoalService`` the CLI
submits to), so a refusal is the same typed error with the same reason. Ids take a
unique prefix, as on the command line. These routes reach the whole project: only
the admin token passes (a share reaches one session). Evidence is listed, not
recorded: recording runs a command, which a server does not do for a caller.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field, JsonValue

from turnkeeper.api.access import access
from turnkeeper.api.deps import Body, IdField, IdPath, JsonObject, store_of
from turnkeeper.kernel import GoalState, TerminalAudit
from turnkeeper.kernel.limits import TEXT_MAX_CHARS, TITLE_MAX_CHARS
from turnkeeper.kernel.model import Claim, Evidence, Gate, Monitor, NoFollowUpReason, Todo
from turnkeeper.kernel.proposals import AddMonitor, RecordReadback, checked_input
from turnkeeper.project_api.goals import Gates, Goals, StoreOf, Todos
from turnkeeper.runtime.services.goal_pages import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, page_of
from turnkeeper.runtime.services.goals import GoalService, id_in_goal, new_id
from turnkeeper.store.base import EventStore

router = APIRouter(prefix="/v1", tags=["goals"])
Store = Annotated[EventStore, Depends(store_of)]
# The kernel's own bounds, checked here too so that the API's schema shows them.
Text = Annotated[str, Field(max_length=TEXT_MAX_CHARS)]
Title = Annotated[str, Field(max_length=TITLE_MAX_CHARS)]
Ids = Annotated[list[IdField], Field(max_length=1000)]


class PageShown(BaseModel):
    """The window of a goal's todos and evidence records an answer holds, and what is
    past it (``next_offset`` is None on the last page)."""

    offset: int
    limit: int
    todos_total: int
    evidence_total: int
    todos_after: int
    evidence_after: int
    next_offset: int | None


class GoalShown(BaseModel):
    """A goal with one page of its todos and evidence records (``goal show``)."""

    state: GoalState
    page: PageShown


class GoalList(BaseModel):
    # Each goal with one page of its todos and evidence records; ``pages[i]`` is
    # ``goals[i]``'s (how many there are, the next page's offset).
    goals: list[GoalState]
    pages: list[PageShown]


class GoalCreate(Body):
    title: Title
    criteria: Annotated[list[Text], Field(max_length=1000)] = Field(default_factory=list)
    objective: Text = ""
    goal_id: IdField | None = None
    vision_agents: Ids = Field(default_factory=list)


class GoalClose(Body):
    summary: Text
    # Given as its JSON string: strict would want the enum member itself.
    reason: NoFollowUpReason = Field(default=NoFollowUpReason.ACCEPTANCE_MET, strict=False)


class CriterionMet(Body):
    evidence_ids: Ids
    revision: IdField | None = None


class ProposalAnswer(BaseModel):
    events: list[JsonObject]
    head_seq: int
    state: GoalState


class TodoCreate(Body):
    title: Title
    depends_on: Ids = Field(default_factory=list)
    requires_evidence: Ids = Field(default_factory=list)
    successor_required: bool = False
    successor_of: IdField | None = None
    todo_id: IdField | None = None


class TodoClaim(Body):
    owner: IdField | None = None
    lease_seconds: float = Field(default=900, gt=0, le=30 * 24 * 3600)


class TodoFence(Body):
    epoch: int = Field(ge=0, le=2**53)
    owner: IdField | None = None


class TodoDone(TodoFence):
    evidence: Ids = Field(default_factory=list)
    revision: IdField | None = None


class GateCreate(Body):
    title: Title
    blocking: bool = True
    scope: Ids = Field(default_factory=list)


class GateResolve(Body):
    decision: Title
    by: Title
    payload: dict[str, JsonValue] = Field(default_factory=dict)


class MonitorCreate(Body):
    target: Title
    cadence_seconds: int = Field(ge=-(2**53), le=2**53)
    stall_limit: int = Field(default=3, ge=-(2**53), le=2**53)
    required: bool = False
    freshness_seconds: int | None = Field(default=None, ge=-(2**53), le=2**53)


class Readback(Body):
    value: JsonValue


def _goals(store: EventStore) -> GoalService:
    return GoalService(store)


def _goal(store: EventStore, ref: str) -> str:
    return _goals(store).resolve("goal", ref)


def _of(store: EventStore) -> StoreOf:
    return lambda: store


@router.get("/goals", response_model=GoalList)
@access("read")
def goals_list(
    store: Store,
    offset: Annotated[int, Query(ge=0, le=2**53)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
) -> GoalList:
    """Every goal with its gates, monitors and obligations, and one page of its todos
    and evidence records (``limit`` of each from ``offset``, as ``GET /goals/{id}``)."""
    shown = [_shown(state, offset, limit) for state in Goals(_of(store)).list()]
    return GoalList(goals=[s.state for s in shown], pages=[s.page for s in shown])


@router.post("/goals", response_model=GoalState)
@access("update")
def goal_create(body: GoalCreate, store: Store) -> GoalState:
    """Create a goal; its criteria get the ids c1, c2, ... in order (``goal add``)."""
    return Goals(_of(store)).add(
        body.title,
        criteria=body.criteria,
        objective=body.objective,
        goal_id=body.goal_id,
        vision_agents=body.vision_agents,
    )


def goal_state(goal_ref: str, store: EventStore) -> GoalState:
    """A goal's whole state, by its id or a unique prefix (the web's pages read it)."""
    return Goals(_of(store)).show(_goal(store, goal_ref))


@router.get("/goals/{goal_id}", response_model=GoalShown)
@access("read")
def goal_show(
    goal_id: IdPath,
    store: Store,
    offset: Annotated[int, Query(ge=0, le=2**53)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
) -> GoalShown:
    """A goal with one page of its todos and of its evidence records (``goal show``):
    ``limit`` of each from ``offset``, in the order they were added; ``page`` says how
    many there are and the next page's offset. Gates, monitors and obligations are whole."""
    return _shown(goal_state(goal_id, store), offset, limit)


def _shown(state: GoalState, offset: int, limit: int) -> GoalShown:
    shown, page = page_of(state, offset, limit)
    return GoalShown(
        state=shown,
        page=PageShown(
            offset=page.offset,
            limit=page.limit,
            todos_total=page.todos_total,
            evidence_total=page.evidence_total,
            todos_after=page.todos_after,
            evidence_after=page.evidence_after,
            next_offset=page.next_offset,
        ),
    )


@router.get("/goals/{goal_id}/audit", response_model=TerminalAudit)
@access("read")
def goal_audit(goal_id: IdPath, store: Store) -> TerminalAudit:
    """The terminal audit now: every counter and every named blocker (``audit``)."""
    return Goals(_of(store)).audit(_goal(store, goal_id))


@router.post("/goals/{goal_id}/close", response_model=GoalState)
@access("update")
def goal_close(goal_id: IdPath, body: GoalClose, store: Store) -> GoalState:
    """Close the goal; refused unless the terminal audit passes (``goal close``)."""
    return Goals(_of(store)).close(_goal(store, goal_id), body.summary, reason=body.reason)


@router.post("/goals/{goal_id}/criteria/{criterion_id}/met", response_model=GoalState)
@access("update")
def criterion_met(
    goal_id: IdPath, criterion_id: IdPath, body: CriterionMet, store: Store
) -> GoalState:
    """Mark a criterion met by passing, fresh evidence (``goal criterion-met``)."""
    gid = _goal(store, goal_id)
    state = _goals(store).load(gid)
    evidence = [id_in_goal(state, "evidence", e) for e in body.evidence_ids]
    criterion = id_in_goal(state, "criterion", criterion_id)
    return Goals(_of(store)).criterion_met(gid, criterion, evidence, revision=body.revision)


@router.post("/goals/{goal_id}/proposals", response_model=ProposalAnswer)
@access("update")
def goal_propose(goal_id: IdPath, body: dict[str, JsonValue], store: Store) -> ProposalAnswer:
    """Any kernel proposal as JSON, the full surface (``propose``)."""
    target = goal_id if body.get("kind") == "create_goal" else _goal(store, goal_id)
    done = Goals(_of(store)).propose(target, body)
    return ProposalAnswer(
        events=[e.model_dump(mode="json") for e in done.events],
        head_seq=done.head_seq,
        state=done.state,
    )


@router.get("/goals/{goal_id}/todos", response_model=list[Todo])
@access("read")
def todos_list(
    goal_id: IdPath,
    store: Store,
    offset: Annotated[int, Query(ge=0, le=2**53)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = MAX_PAGE_SIZE,
) -> list[Todo]:
    """The goal's todos in the order they were added: ``limit`` of them (at most 1000)
    from ``offset``."""
    shown, _ = page_of(goal_state(goal_id, store), offset, limit)
    return list(shown.todos.values())


@router.post("/goals/{goal_id}/todos", response_model=Todo)
@access("update")
def todo_create(goal_id: IdPath, body: TodoCreate, store: Store) -> Todo:
    """Add a todo (``todo add``)."""
    gid = _goal(store, goal_id)
    state = _goals(store).load(gid)
    return Todos(_of(store)).add(
        gid,
        body.title,
        depends_on=[id_in_goal(state, "todo", t) for t in body.depends_on],
        requires_evidence=body.requires_evidence,
        successor_required=body.successor_required,
        successor_of=id_in_goal(state, "todo", body.successor_of) if body.successor_of else None,
        todo_id=body.todo_id,
    )


def _todo(store: EventStore, ref: str) -> str:
    return _goals(store).locate("todo", ref)[1]


@router.get("/todos/{todo_id}", response_model=Todo)
@access("read")
def todo_show(todo_id: IdPath, store: Store) -> Todo:
    """One todo (``todo show``)."""
    return Todos(_of(store)).show(_todo(store, todo_id))


@router.post("/todos/{todo_id}/claim", response_model=Claim)
@access("update")
def todo_claim(todo_id: IdPath, body: TodoClaim, store: Store) -> Claim:
    """Claim a todo under a lease; later writes give the claim's epoch (``todo claim``)."""
    todos = Todos(_of(store))
    return todos.claim(_todo(store, todo_id), owner=body.owner, lease_seconds=body.lease_seconds)


@router.post("/todos/{todo_id}/release", response_model=Todo)
@access("update")
def todo_release(todo_id: IdPath, body: TodoFence, store: Store) -> Todo:
    """Give a claimed todo back (``todo release``)."""
    return Todos(_of(store)).release(_todo(store, todo_id), epoch=body.epoch, owner=body.owner)


@router.post("/todos/{todo_id}/done", response_model=Todo)
@access("update")
def todo_done(todo_id: IdPath, body: TodoDone, store: Store) -> Todo:
    """Finish a claimed todo; its required evidence must pass and be fresh (``todo done``)."""
    gid, tid = _goals(store).locate("todo", todo_id)
    state = _goals(store).load(gid)
    return Todos(_of(store)).done(
        tid,
        epoch=body.epoch,
        evidence=[id_in_goal(state, "evidence", e) for e in body.evidence],
        owner=body.owner,
        revision=body.revision,
    )


@router.get("/goals/{goal_id}/gates", response_model=list[Gate])
@access("read")
def gates_list(goal_id: IdPath, store: Store) -> list[Gate]:
    """The goal's gates, open and resolved (``gate list``)."""
    return Gates(_of(store)).list(_goal(store, goal_id))


@router.post("/goals/{goal_id}/gates", response_model=Gate)
@access("update")
def gate_create(goal_id: IdPath, body: GateCreate, store: Store) -> Gate:
    """Open a gate: a decision that blocks work until resolved (``gate open``)."""
    gid = _goal(store, goal_id)
    state = _goals(store).load(gid)
    scope = [id_in_goal(state, "todo", t) for t in body.scope]
    return Gates(_of(store)).open(gid, body.title, blocking=body.blocking, scope=scope)


@router.post("/gates/{gate_id}/resolve", response_model=Gate)
@access("update")
def gate_resolve(gate_id: IdPath, body: GateResolve, store: Store) -> Gate:
    """Resolve an open gate with a decision (``gate resolve``)."""
    full = _goals(store).locate("gate", gate_id)[1]
    return Gates(_of(store)).resolve(full, body.decision, by=body.by, payload=body.payload)


@router.get("/goals/{goal_id}/monitors", response_model=list[Monitor])
@access("read")
def monitors_list(goal_id: IdPath, store: Store) -> list[Monitor]:
    """The goal's monitors: cadence, next due, no-change streak, freshness."""
    return list(_goals(store).load(_goal(store, goal_id)).monitors.values())


@router.post("/goals/{goal_id}/monitors", response_model=Monitor)
@access("update")
def monitor_create(goal_id: IdPath, body: MonitorCreate, store: Store) -> Monitor:
    """Watch an external fact, due for a readback every cadence (``monitor add``)."""
    mid = new_id("mon")
    with checked_input():
        proposal = AddMonitor(
            monitor_id=mid,
            target=body.target,
            cadence_seconds=body.cadence_seconds,
            stall_limit=body.stall_limit,
            required=body.required,
            freshness_seconds=body.freshness_seconds or None,
        )
    return _goals(store).submit(_goal(store, goal_id), proposal).state.monitors[mid]


@router.post("/monitors/{monitor_id}/readback", response_model=Monitor)
@access("update")
def monitor_readback(monitor_id: IdPath, body: Readback, store: Store) -> Monitor:
    """Record what the monitored fact reads now (``monitor readback``)."""
    gid, mid = _goals(store).locate("monitor", monitor_id)
    with checked_input():
        proposal = RecordReadback(monitor_id=mid, value=body.value)
    return _goals(store).submit(gid, proposal).state.monitors[mid]


@router.get("/goals/{goal_id}/evidence", response_model=list[Evidence])
@access("read")
def evidence_list(goal_id: IdPath, store: Store) -> list[Evidence]:
    """The goal's evidence records in the order they were recorded (``evidence list``)."""
    return list(_goals(store).load(_goal(store, goal_id)).evidence.values())
