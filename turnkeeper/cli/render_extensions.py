"""``status``'s extensions: installed, enabled, ready and authorised, side by side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from turnkeeper.cli.fast_table import FastTable
from turnkeeper.cli.output import console, safe

if TYPE_CHECKING:
    from turnkeeper.runtime.services.extension_states import ExtensionStatus


def _ready(ext: ExtensionStatus) -> str:
    if ext.ready is None:
        return "[dim]unchecked[/] (turnkeeper doctor)"
    when = f" at {ext.checked_at:%Y-%m-%d %H:%M} UTC" if ext.checked_at else ""
    if ext.ready == "ok":
        return f"[green]yes[/]{when}"
    return f"[red]{safe(ext.ready)}[/]{when}: {safe(ext.ready_detail)}"


def render_extension_states(rows: Sequence[ExtensionStatus]) -> None:
    """The extensions a live session uses or the project disabled (the rest are only
    installed: ``turnkeeper extensions`` lists them). Ready is what ``doctor`` last
    found on this machine."""
    shown = [r for r in rows if r.authorised_by or not r.enabled or not r.installed]
    if not shown:
        return
    table = FastTable(
        "extension",
        "installed",
        "enabled",
        "ready",
        "authorised by",
        title="Extensions",
    )
    for ext in shown:
        what = "host" if ext.group == "host" else "effect"
        installed = (
            f"{safe(ext.package or '?')} {safe(ext.version or '')}".strip()
            if ext.installed
            else "[red]no[/]"
        )
        enabled = "yes" if ext.enabled else f"[red]no[/]: {safe(ext.disabled_reason or '')}"
        sessions = ", ".join(safe(s[:8]) for s in ext.authorised_by[:5])
        more = len(ext.authorised_by) - 5
        authorised = (sessions + (f" and {more} more" if more > 0 else "")) or "-"
        table.add_row(f"{safe(ext.name)} ({what})", installed, enabled, _ready(ext), authorised)
    console.print(table)
