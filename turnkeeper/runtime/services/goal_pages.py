"""One page of a goal: its todos and evidence records a window at a time.

A goal that lives for days holds thousands of todos and far more evidence records;
``goal show``, the API's goal route and the web's goal page print one page of each
(the same window, ``offset`` and ``limit``, over the todos in the order they were
added and over the evidence records in the order they were recorded) and say how
many there are in all, so a reader asks for the next page rather than receiving the
whole goal. Gates, monitors, obligations and criteria stay whole: a goal has few.
``goal show`` pages its audit's blockers the same way (one per open todo, so as many
as the todos); the audit's counters are always whole.
"""

from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel, ConfigDict, computed_field

from turnkeeper.errors import InvalidArgument

if TYPE_CHECKING:
    # Only for the annotations: the command line imports the page size at parse time,
    # which must not wait for the kernel.
    from turnkeeper.kernel import GoalState, TerminalAudit

# What a reader sees when it names no page size: enough to work from at a terminal.
DEFAULT_PAGE_SIZE = 50
# The largest page one read returns: a page is a bounded answer, whatever is asked.
MAX_PAGE_SIZE = 1000

_V = TypeVar("_V")


class GoalPage(BaseModel):
    """Which window of a goal's todos and evidence records a reader was given."""

    model_config = ConfigDict(frozen=True)

    offset: int
    limit: int
    todos_total: int
    evidence_total: int
    # Set when the page's audit was paged too (``page_audit``).
    blockers_total: int = 0

    @computed_field  # type: ignore[prop-decorator]  # in --json output too
    @property
    def todos_after(self) -> int:
        """Todos past this page."""
        return max(0, self.todos_total - self.offset - self.limit)

    @computed_field  # type: ignore[prop-decorator]  # in --json output too
    @property
    def evidence_after(self) -> int:
        """Evidence records past this page."""
        return max(0, self.evidence_total - self.offset - self.limit)

    @computed_field  # type: ignore[prop-decorator]  # in --json output too
    @property
    def blockers_after(self) -> int:
        """The audit's blockers past this page."""
        return max(0, self.blockers_total - self.offset - self.limit)

    @computed_field  # type: ignore[prop-decorator]  # in --json output too
    @property
    def next_offset(self) -> int | None:
        """The offset of the next page, or None when this page is the last."""
        more = self.todos_after or self.evidence_after or self.blockers_after
        return self.offset + self.limit if more else None

    def remaining_line(self) -> str | None:
        """What is left past this page, for a person ("1,950 more todos ..."), or None."""
        parts = []
        if self.todos_after:
            parts.append(f"{self.todos_after:,} more todos")
        if self.evidence_after:
            parts.append(f"{self.evidence_after:,} more evidence records")
        if self.blockers_after:
            parts.append(f"{self.blockers_after:,} more blockers")
        if not parts:
            return None
        return f"{', '.join(parts)} (next page: --offset {self.next_offset})"


def check_page(offset: int, limit: int) -> None:
    """``InvalidArgument`` for a window no page can be: negative, empty or too large."""
    if offset < 0:
        raise InvalidArgument(f"offset {offset} < 0", reason="bad_page", details={"offset": offset})
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise InvalidArgument(
            f"limit {limit} is not within 1..{MAX_PAGE_SIZE}",
            reason="bad_page",
            details={"limit": limit, "max": MAX_PAGE_SIZE},
        )


def _window(table: dict[str, _V], offset: int, limit: int) -> dict[str, _V]:
    # islice walks only to the page's end, not the whole table.
    return dict(islice(table.items(), offset, offset + limit))


def page_of(
    state: GoalState, offset: int = 0, limit: int = DEFAULT_PAGE_SIZE
) -> tuple[GoalState, GoalPage]:
    """``state`` with only one page of its todos and evidence records, and the page."""
    check_page(offset, limit)
    page = GoalPage(
        offset=offset,
        limit=limit,
        todos_total=len(state.todos),
        evidence_total=len(state.evidence),
    )
    paged = state.model_copy(
        update={
            "todos": _window(state.todos, offset, limit),
            "evidence": _window(state.evidence, offset, limit),
        }
    )
    return paged, page


def page_audit(audit: TerminalAudit, page: GoalPage) -> tuple[TerminalAudit, GoalPage]:
    """``audit`` with only ``page``'s window of its blockers (its counters whole), and
    the page, now counting the blockers too."""
    window = audit.blockers[page.offset : page.offset + page.limit]
    paged = audit.model_copy(update={"blockers": window})
    return paged, page.model_copy(update={"blockers_total": len(audit.blockers)})
