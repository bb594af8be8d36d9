"""``turnkeeper doctor``: is every installed extension ready, and can every session run?

Each check yields a :class:`Finding`. An extension that fails to load is
``load_failed``; the Codex CLI and Claude Code hosts are checked for their binary,
version and key (:mod:`.agent_clis`); the other built-ins need nothing outside
turnkeeper once they load. Inside a project every live session's host config is
loaded as the driver loads it (as ``session create`` checks it), and its effects
section too, since a provider's config is first read at the turn's first effect.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from turnkeeper.boundary.config_secrets import secret_fields
from turnkeeper.effects import effects_config, load_provider, split_host_config
from turnkeeper.errors import NotFound, TurnkeeperError
from turnkeeper.extensions.agent_clis import AGENT_CLIS, check_agent_cli
from turnkeeper.extensions.catalog import Extension, list_extensions, one_line
from turnkeeper.extensions.findings import MAX_DETAIL_CHARS, ExtensionVerdict, Finding
from turnkeeper.hosts import load_host
from turnkeeper.hosts.agent_cli import AgentCliConfig
from turnkeeper.hosts.subprocess_config import validate_config
from turnkeeper.json_types import JsonDict, JsonMapping
from turnkeeper.kernel.session.state import SessionState

# Built-ins that run with nothing but turnkeeper and the user's own commands.
_SELF_CONTAINED = frozenset({"subprocess", "python", "scripted", "command", "http"})
# Sessions that will never run a turn again are not checked.
_FINISHED = frozenset({"closed", "deleted"})


class DoctorReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    ok: bool
    findings: list[Finding]
    # The project whose sessions were checked; None outside a project.
    project: str | None = None
    sessions_checked: int = 0
    # Each extension checked, ready or not (what ``status`` shows as ready).
    verdicts: list[ExtensionVerdict] = []
    # Extensions checked that the project does not use (no live session's host kind or
    # effect provider, and not named): their findings are information, not problems,
    # so a project on the subprocess host is not failed for Codex's missing key.
    unused: list[str] = []

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if not f.ok and f.extension not in self.unused]

    @property
    def informational(self) -> list[Finding]:
        """What is not ready among the extensions the project does not use."""
        return [f for f in self.findings if not f.ok and f.extension in self.unused]


def check_kinds(kinds: Sequence[str], extensions: Sequence[Extension]) -> None:
    """Every KIND asked for names an installed extension, else NOT_FOUND listing them."""
    known = sorted({ext.name for ext in extensions})
    unknown = sorted(set(kinds) - set(known))
    if unknown:
        raise NotFound(
            f"no extension named {', '.join(unknown)}; installed: {', '.join(known)}",
            reason="unknown_extension",
            details={"unknown": unknown, "known": known},
        )


def diagnose(
    kinds: Sequence[str] = (),
    sessions: Sequence[SessionState] | None = None,
    project: str | None = None,
) -> DoctorReport:
    """Every finding for the extensions named in ``kinds`` (all when empty) and the
    live ``sessions`` that use them (None: outside a project).

    What counts as a problem: every finding about a named KIND; else, in a project,
    those about the extensions its live sessions use (the others are listed as
    ``unused``); outside a project, with nothing to go by, every finding."""
    extensions = list_extensions()
    check_kinds(kinds, extensions)
    wanted = set(kinds)
    live = [s for s in sessions or () if s.status not in _FINISHED]
    used: set[str] | None = None  # None: every extension counts
    if wanted:
        used = wanted
    elif sessions is not None:
        used = set().union(*(_uses(s) for s in live))
    findings: list[Finding] = []
    verdicts: list[ExtensionVerdict] = []
    unused: list[str] = []
    for ext in extensions:
        if ext.active and (not wanted or ext.name in wanted):
            own = _extension_findings(ext)
            findings += own
            verdicts.append(_verdict(ext, own))
            if used is not None and ext.name not in used:
                unused.append(ext.name)
    checked = [s for s in live if not wanted or _uses(s) & wanted]
    for state in sorted(checked, key=lambda s: s.session_id):
        findings += _session_findings(state, wanted)
    report = DoctorReport(
        ok=True,
        findings=findings,
        project=project,
        sessions_checked=len(checked),
        verdicts=verdicts,
        unused=sorted(set(unused)),
    )
    return report.model_copy(update={"ok": not report.problems})


def _verdict(ext: Extension, findings: Sequence[Finding]) -> ExtensionVerdict:
    problems = [f for f in findings if not f.ok]
    return ExtensionVerdict(
        group=ext.group,
        name=ext.name,
        verdict=problems[0].status if problems else "ok",
        problems=len(problems),
        detail=problems[0].detail[:MAX_DETAIL_CHARS] if problems else "",
    )


def _extension_findings(ext: Extension) -> list[Finding]:
    if not ext.loads:
        return [
            Finding(
                extension=ext.name,
                check="load",
                status="load_failed",
                detail=f"{ext.target} (from {ext.package or 'an unknown package'}) does not "
                f"load: {ext.error}",
                fix=f"reinstall {ext.package or 'its package'} "
                f"(pip install --force-reinstall {ext.package or '...'}), or uninstall it",
            )
        ]
    what = "host kind" if ext.group == "host" else "effect provider"
    loaded = Finding(
        extension=ext.name, check="load", status="ok", detail=f"{what} {ext.target} loads"
    )
    cli = AGENT_CLIS.get(ext.name) if ext.group == "host" else None
    if cli is not None and ext.package == "turnkeeper":
        cfg: AgentCliConfig = validate_config(cli.config_model, {})
        return [loaded, *check_agent_cli(cli, cfg)]
    if ext.package == "turnkeeper" and ext.name in _SELF_CONTAINED:
        detail = f"{what} {ext.target} loads; it needs nothing outside turnkeeper"
        return [loaded.model_copy(update={"detail": detail})]
    return [loaded]


def _uses(state: SessionState) -> set[str]:
    """The extensions a session uses: its host kind and its effect providers' kinds."""
    used = {state.host_kind}
    try:
        effects = effects_config(state.host_config)
    except TurnkeeperError:
        return used
    for name in effects.providers:
        spec = effects.spec(name)
        if spec is not None:
            used.add(spec.kind)
    return used


def _session_findings(state: SessionState, wanted: set[str]) -> list[Finding]:
    short = state.session_id[:8]
    kind = state.host_kind
    config: JsonDict = dict(state.host_config)
    findings: list[Finding] = []
    if not wanted or kind in wanted:
        findings += _host_config(short, kind, config)
        findings += _stored_secrets(state.session_id, kind, config)
    findings += _effects_config(short, config, wanted)
    return findings


def _stored_secrets(sid: str, kind: str, config: JsonMapping) -> list[Finding]:
    """A config stored before ``session create`` refused secrets may hold one: it is
    in the event log as given (which is never rewritten). Name the field, never the
    value, and say what to do."""
    return [
        Finding(
            extension=kind,
            check=f"session {sid[:8]} secrets",
            status="secret_in_config",
            detail=f"session {sid[:8]}: host config field {field} holds {why}, stored in "
            "the event log before turnkeeper refused secrets in configurations",
            fix="rotate that secret; create a new session that names it in pass_env "
            "instead (docs/boundary.md), and stop this one "
            f"(turnkeeper session stop {sid}); keep the database as private as the secret",
        )
        for field, why in secret_fields(config)
    ]


def _host_config(short: str, kind: str, config: JsonMapping) -> list[Finding]:
    check = f"session {short} host config"
    host_config = split_host_config(config)
    recreate = (
        f"create the session again with a config host {kind!r} accepts "
        f"(turnkeeper session create GOAL --host {kind} --host-config ...)"
    )
    try:
        load_host(kind, host_config)
    except NotFound as error:
        if error.reason != "unknown_host_kind":  # the host's own refusal
            return [_invalid(kind, check, f"session {short}: {error.message}", recreate)]
        return [
            Finding(
                extension=kind,
                check=check,
                status="missing",
                detail=f"session {short} uses host kind {kind!r}, which is not installed",
                fix=f"install the package that provides host kind {kind!r}, or {recreate}",
            )
        ]
    except TurnkeeperError as error:
        return [_invalid(kind, check, f"session {short}: {error.message}", recreate)]
    except Exception as error:  # a plugin's own validation may raise anything
        return [_invalid(kind, check, f"session {short}: {one_line(error)}", recreate)]
    ok = Finding(extension=kind, check=check, status="ok", detail=f"session {short}: valid")
    cli = AGENT_CLIS.get(kind)
    if cli is None:
        return [ok]
    cfg: AgentCliConfig = validate_config(cli.config_model, host_config)
    default: AgentCliConfig = validate_config(cli.config_model, {})
    if _cli_setup(cfg) == _cli_setup(default):
        return [ok]  # the same binary and key as the defaults, checked above
    return [ok, *check_agent_cli(cli, cfg, scope=f"session {short} ")]


def _cli_setup(cfg: AgentCliConfig) -> tuple[object, ...]:
    """What decides which binary runs and which key it finds."""
    dumped = cfg.model_dump()
    homes = (dumped.get("codex_home"), dumped.get("config_dir"), dumped.get("config"))
    return (cfg.binary, sorted(cfg.env.items()), repr(homes))


def _effects_config(short: str, config: JsonMapping, wanted: set[str]) -> list[Finding]:
    check = f"session {short} effects"
    fix = "create the session again with a corrected effects section (docs/agents.md, Effects)"
    try:
        effects = effects_config(config)
    except TurnkeeperError as error:
        if wanted:
            return []  # which provider it was meant for cannot be known
        return [_invalid("effects", check, f"session {short}: {error.message}", fix)]
    findings: list[Finding] = []
    for name in sorted(effects.providers):
        spec = effects.spec(name)
        if spec is None or (wanted and spec.kind not in wanted):
            continue
        where = f"session {short}, provider {name!r}"
        try:
            load_provider(spec.kind, dict(spec.config))
        except NotFound as error:
            if error.reason != "unknown_effect_provider":  # the provider's own refusal
                findings.append(_invalid(spec.kind, check, f"{where}: {error.message}", fix))
                continue
            findings.append(
                Finding(
                    extension=spec.kind,
                    check=check,
                    status="missing",
                    detail=f"{where}: effect provider {spec.kind!r} is not installed",
                    fix=f"install the package that provides effect provider {spec.kind!r}, "
                    f"or {fix[0].lower()}{fix[1:]}",
                )
            )
        except TurnkeeperError as error:
            findings.append(_invalid(spec.kind, check, f"{where}: {error.message}", fix))
        except Exception as error:  # a plugin's own validation may raise anything
            findings.append(_invalid(spec.kind, check, f"{where}: {one_line(error)}", fix))
        else:
            findings.append(
                Finding(extension=spec.kind, check=check, status="ok", detail=f"{where}: valid")
            )
    return findings


def _invalid(extension: str, check: str, detail: str, fix: str) -> Finding:
    return Finding(
        extension=extension, check=check, status="invalid_config", detail=detail, fix=fix
    )
