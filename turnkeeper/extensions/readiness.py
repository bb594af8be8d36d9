"""Whether a session's agent CLI host can run a turn here, before it is asked to.

A Codex or Claude Code session whose CLI is missing, too old or has no key would fail
every turn it is given, each failure costing an attempt and a backoff. ``session
create`` and ``run`` ask first, with the checks ``turnkeeper doctor`` makes
(:func:`~turnkeeper.extensions.agent_clis.check_agent_cli`: binary, version, a key or
login the CLI will use) on the session's own host config, and refuse with the doctor's
finding and its fix (reason ``host_not_ready``). Other host kinds need nothing outside
turnkeeper that can be checked here: they are always ready.
"""

from __future__ import annotations

from turnkeeper.effects import split_host_config
from turnkeeper.errors import FailedPrecondition
from turnkeeper.extensions.agent_clis import AGENT_CLIS, check_agent_cli
from turnkeeper.extensions.findings import Finding
from turnkeeper.hosts.subprocess_config import validate_config
from turnkeeper.json_types import JsonMapping

HOST_NOT_READY = "host_not_ready"


def host_problems(kind: str, host_config: JsonMapping) -> list[Finding]:
    """What keeps a host of ``kind`` with ``host_config`` from running a turn here
    (the doctor's findings that are not ok); [] when it is ready or not an agent CLI.
    ``InvalidArgument`` when the config is not one the host accepts."""
    cli = AGENT_CLIS.get(kind)
    if cli is None:
        return []
    cfg = validate_config(cli.config_model, split_host_config(host_config))
    return [finding for finding in check_agent_cli(cli, cfg) if not finding.ok]


def describe(problems: list[Finding]) -> str:
    """The findings as one line: each detail with its fix."""
    return "; ".join(f"{p.detail} (fix: {p.fix})" if p.fix else p.detail for p in problems)


def not_ready(kind: str, problems: list[Finding]) -> FailedPrecondition:
    """The refusal of a host that is not ready: the doctor's findings and fixes."""
    return FailedPrecondition(
        f"host {kind} is not ready here: {describe(problems)}",
        reason=HOST_NOT_READY,
        details={
            "host": kind,
            "findings": [
                {"check": p.check, "status": p.status, "detail": p.detail, "fix": p.fix}
                for p in problems
            ],
        },
    )


def check_host_ready(kind: str, host_config: JsonMapping) -> None:
    """Refuse (``FAILED_PRECONDITION``, ``host_not_ready``) a host that is not ready."""
    problems = host_problems(kind, host_config)
    if problems:
        raise not_ready(kind, problems)
