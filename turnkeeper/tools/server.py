"""The turnkeeper tools as a stdio MCP server (``turnkeeper mcp``).

Each tool is a thin shell over :class:`~turnkeeper.tools.service.ToolService`: its
signature is the schema the model sees, its docstring the description the model reads.
A typed error (no capability, a malformed value, ...) comes back to the agent as an MCP
tool error result (``isError``) whose text starts with the error's code and reason; the
server itself goes on. Arguments of the wrong JSON type are refused by the SDK's own
schema check before the tool runs, also as an error result, also unjournaled.

Imported only by the ``mcp`` command: the SDK is not something ``turnkeeper --help``
should pay for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Final, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, JsonValue

from turnkeeper.errors import TurnkeeperError
from turnkeeper.hosts.base import TOOLS_SERVER_NAME
from turnkeeper.kernel.model import NoFollowUpReason, VisionStatus
from turnkeeper.tools.calls import CriterionArg
from turnkeeper.tools.service import ToolService

INSTRUCTIONS: Final = """\
turnkeeper runs this agent session turn by turn. This turn has one bounded piece of \
work (see the `brief` tool); turnkeeper checks what you report against the goal's \
rules, so report through these tools, not only in prose.

- `brief`: what this turn asks, and the state of the work. `goal`: the goal as it \
stands with your calls so far applied.
- `record_evidence`: run a check (tests, a build, `test -s FILE`) in the workspace. A \
todo that requires evidence is completed only with passing evidence under its key.
- `todo_done` when this turn's todo is finished. `add_todo` for more work, `open_gate` \
to ask a person, `meet_criterion` with passing evidence, `update_acceptance`, \
`vision_checkpoint`, `no_follow_up` (the answer to a replan obligation that needs no \
change), `request_effect` (an external side effect, applied once).

Every call is journaled and answered with what turnkeeper would decide now (a dry \
run). Nothing is applied until the turn ends: then turnkeeper runs every evidence \
command again and decides for real. When a call is refused, its answer says why: fix \
the cause and call again. When this turn's work is done and reported, stop.
"""

# Lists of ids: a tuple, so the default is immutable (JSON Schema: an array all the same).
_Ids = tuple[str, ...]


def _answer(tool: Callable[[], str]) -> str:
    """``tool()``, or its typed error as the MCP error result the agent reads."""
    try:
        return tool()
    except TurnkeeperError as error:
        raise ToolError(f"{error.code.value} ({error.reason}): {error.message}") from None


_Fn = TypeVar("_Fn", bound=Callable[..., str])


def tool(app: MCPServer[object]) -> Callable[[_Fn], _Fn]:
    """Register a tool whose description is its docstring as one paragraph: the SDK
    would send the docstring as written, its indentation included."""

    def register(fn: _Fn) -> _Fn:
        description = " ".join((fn.__doc__ or "").split())
        return app.tool(description=description, structured_output=False)(fn)

    return register


def build_server(tools: ToolService) -> MCPServer[object]:
    """The server of ``tools`` (the turn its environment names)."""
    app: MCPServer[object] = MCPServer(
        TOOLS_SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    @tool(app)
    def brief() -> str:
        """This turn's brief: what turnkeeper asks of this turn (the todo, why a previous
        attempt was refused, the evidence required, gates, replan obligations, when to
        stop) and the state of the goal when the turn started."""
        return _answer(tools.brief)

    @tool(app)
    def goal() -> str:
        """The goal as it stands now, with this turn's calls applied: acceptance criteria
        (met or not), todos with status, dependencies and required evidence, open gates,
        open replan obligations, due vision checkpoints, and whether todo_done would be
        accepted now."""
        return _answer(tools.goal)

    @tool(app)
    def record_evidence(
        command: Annotated[str, Field(description="A shell command, run with `sh -c`.")],
        key: Annotated[
            str | None,
            Field(
                description="What it proves: a todo's required evidence key. Default: the command."
            ),
        ] = None,
        freshness_seconds: Annotated[
            int, Field(description="How long the result stays usable, in seconds.")
        ] = 3600,
    ) -> str:
        """Run a check in the workspace (at most 600 s) and record it as this turn's
        evidence. Answers with the exit code and the output's last lines. A todo that
        requires evidence `tests` is completed only with passing evidence whose key is
        `tests`. When the turn ends turnkeeper runs the command again, and only that run
        counts: leave the workspace so that it passes."""
        return _answer(lambda: tools.record_evidence(command, key, freshness_seconds))

    @tool(app)
    def todo_done(
        summary: Annotated[str, Field(description="What was done, for people.")] = "",
    ) -> str:
        """Report this turn's todo as done. It is completed when the turn ends, with this
        turn's evidence, if the goal's rules accept it (required evidence passing, the
        claim still this session's); the answer says whether they would now."""
        return _answer(lambda: tools.todo_done(summary))

    @tool(app)
    def add_todo(
        title: Annotated[str, Field(description="The new todo's title, one line.")],
        todo_id: Annotated[
            str | None, Field(description="Its id (no spaces). Default: one is made.")
        ] = None,
        depends_on: Annotated[_Ids, Field(description="Ids of todos it waits for.")] = (),
        required_evidence: Annotated[
            _Ids, Field(description="Evidence keys it must be completed with.")
        ] = (),
        successor_of: Annotated[
            str | None, Field(description="The todo it succeeds (links both ways).")
        ] = None,
        discharges: Annotated[
            _Ids,
            Field(description="Obligation ids it answers (in a replan turn, default: all open)."),
        ] = (),
    ) -> str:
        """Add a todo to the goal: more work found, or a successor of a todo that should
        not be done as written. The answer gives its id."""
        return _answer(
            lambda: tools.add_todo(
                title,
                todo_id,
                list(depends_on),
                list(required_evidence),
                successor_of,
                list(discharges),
            )
        )

    @tool(app)
    def update_acceptance(
        criteria: Annotated[
            list[CriterionArg], Field(description="Criteria as {id, text} objects.")
        ],
        mode: Annotated[
            Literal["add", "replace"],
            Field(description="add: to the current criteria; replace: the whole list."),
        ] = "add",
        discharges: Annotated[
            _Ids,
            Field(description="Obligation ids it answers (in a replan turn, default: all open)."),
        ] = (),
    ) -> str:
        """Change the goal's acceptance criteria (a material change: vision checkpoints
        are due again afterwards)."""
        return _answer(lambda: tools.update_acceptance(criteria, mode, list(discharges)))

    @tool(app)
    def no_follow_up(
        reason: Annotated[NoFollowUpReason, Field(description="Why nothing needs to change.")],
        summary: Annotated[str, Field(description="The reasoning, for people.")],
        discharges: Annotated[
            _Ids, Field(description="The replan obligation ids it answers. Default: all open.")
        ] = (),
    ) -> str:
        """Answer replan obligations that need no change to the plan, with a structured
        reason. Name the obligations (ids in the brief or the goal tool)."""
        return _answer(lambda: tools.no_follow_up(reason, summary, list(discharges)))

    @tool(app)
    def vision_checkpoint(
        status: Annotated[VisionStatus, Field(description="What became of your vision.")],
        reason: Annotated[str, Field(description="Why (required when unchanged).")] = "",
        vision_text: Annotated[
            str | None, Field(description="The patched vision (required when patched).")
        ] = None,
        discharges: Annotated[
            _Ids,
            Field(description="Replan obligation ids it answers (patched/retired/superseded)."),
        ] = (),
        agent: Annotated[
            str | None, Field(description="Whose vision. Default: the one the goal requires.")
        ] = None,
    ) -> str:
        """Record a vision checkpoint: after a material change of the goal, say whether
        your picture of the work is patched, unchanged, retired, superseded or not needed."""
        return _answer(
            lambda: tools.vision_checkpoint(status, reason, vision_text, list(discharges), agent)
        )

    @tool(app)
    def meet_criterion(
        criterion_id: Annotated[str, Field(description="The criterion's id (c1, c2, ...).")],
        evidence_key: Annotated[
            str, Field(description="The key of passing evidence that proves it.")
        ],
    ) -> str:
        """Meet an acceptance criterion with passing, fresh evidence: this turn's latest
        record_evidence under that key (else the goal's latest record of it)."""
        return _answer(lambda: tools.meet_criterion(criterion_id, evidence_key))

    @tool(app)
    def open_gate(
        title: Annotated[str, Field(description="The question or decision, one line.")],
        blocking: Annotated[
            bool, Field(description="Whether the work it covers waits for the answer.")
        ] = True,
        scope: Annotated[
            _Ids, Field(description="Todo ids it covers. Default: the whole goal.")
        ] = (),
        gate_id: Annotated[
            str | None, Field(description="Its id (no spaces). Default: one is made.")
        ] = None,
    ) -> str:
        """Ask a person for a decision you must not take alone. A blocking gate holds the
        work it covers until someone resolves it."""
        return _answer(lambda: tools.open_gate(title, blocking, list(scope), gate_id))

    @tool(app)
    def request_effect(
        provider: Annotated[
            str, Field(description="The effect provider, as the session's config names it.")
        ],
        request: Annotated[
            dict[str, JsonValue] | None, Field(description="What the provider should do.")
        ] = None,
    ) -> str:
        """Ask for an external side effect (an HTTP call, a command) applied at most once,
        after the turn ends, through a provider the session's host config lists."""
        return _answer(lambda: tools.request_effect(provider, request))

    return app


def serve(env: Mapping[str, str]) -> None:
    """Serve the tools of the turn ``env`` names (TURNKEEPER_TOOLS_DIR and _TOKEN) over
    stdio until the client closes stdin; the goal is read ahead meanwhile."""
    tools = ToolService(env)
    app = build_server(tools)
    tools.read_ahead()
    app.run()
