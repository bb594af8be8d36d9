"""How a command host's turn becomes a process: its argv, its environment, its program.

Kept apart from :mod:`turnkeeper.hosts.subprocess_host`, which runs the process.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated

from pydantic import Field

from turnkeeper.hosts.base import ATTEMPT_ENV, MARKER_ENV, SESSION_ENV, TurnRequest
from turnkeeper.memo import Memo

#: The todo a turn works on ("" on a turn without one, such as a replan): set for
#: every command host, so a shell agent needs no JSON parser to know its todo.
TODO_ENV = "TURNKEEPER_TODO_ID"

# What a host gets of the environment ``run`` started in without asking for it: what
# a program needs to run at all (a shell, a locale, a temp dir, a terminal, proxies
# and CA bundles to reach a network). Everything else reaches an agent only when its
# config names it (``pass_env``: names, or prefixes ending in ``*``), or when it
# inherits the whole environment (``inherit_env``): a credential exported for the
# control plane, or for anything else, is not handed to every agent by default.
CORE_ENV = (
    *("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TERM"),
    *("TZ", "TMPDIR", "XDG_RUNTIME_DIR", "VIRTUAL_ENV", "COLORTERM", "NO_COLOR"),
    *("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"),
    *("ALL_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"),
    "NODE_EXTRA_CA_CERTS",
)
# The control plane's own credentials: never passed on to an agent, inherited or not
# (a database URL may carry its password; libpq reads these two).
CONTROL_PLANE_SECRETS = frozenset(
    {"TURNKEEPER_DATABASE_URL", "TURNKEEPER_TEST_POSTGRES_URL", "PGPASSWORD", "PGPASSFILE"}
)

# Prepended to every host command once :func:`die_with_parent` was called: util-linux
# ``setpriv`` sets PR_SET_PDEATHSIG and execs the command, so no Python runs between
# fork and exec (a ``preexec_fn`` is unsafe in a threaded process).
_parent_death: list[str] = []


def die_with_parent() -> bool:
    """From now on, host processes this process spawns get SIGKILL when the *thread*
    that spawned them ends (``PR_SET_PDEATHSIG``); the caller spawns from a thread
    that lives as long as it does. False where ``setpriv`` is missing."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return False
    _parent_death[:] = [setpriv, "--pdeathsig", "KILL", "--"]
    return True


def with_parent_death(args: list[str]) -> list[str]:
    """``args`` behind the parent-death wrapper, if :func:`die_with_parent` is on."""
    return [*_parent_death, *args]


# One pass, so a value that itself holds a placeholder (instructions quoting
# "{workspace}", a todo title) reaches the command as written. Compiled once: building
# and looking up the pattern cost more than the substitution, every turn.
_PLACEHOLDER = re.compile(
    r"\{(?:instructions|workspace|turn_id|session_id|attempt|handle|todo_id|todo_title)\}"
)


def substitute(args: list[str], request: TurnRequest) -> list[str]:
    """The placeholders of ``command`` / ``resume_command`` filled in from the request
    (plain substring replacement, so JSON braces in an argument are safe)."""
    if not any("{" in template for template in args):
        return list(args)  # the usual host command names no placeholder
    values = {
        "{instructions}": request.instructions,
        "{workspace}": str(request.workspace),
        "{turn_id}": request.turn_id,
        "{session_id}": request.session_id,
        "{attempt}": str(request.attempt),
        "{handle}": request.host_session_handle or "",
        "{todo_id}": request.todo_id or "",
        "{todo_title}": request.todo_title or "",
    }
    return [_PLACEHOLDER.sub(lambda m: values[m.group(0)], template) for template in args]


# A variable a host config passes on: a name, or a prefix ending in ``*``.
PassedName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*\*?$", max_length=200)]


class NameMatcher:
    """Whether a name is one of ``patterns`` (exact names, or prefixes ending in ``*``).
    The patterns are split once into a set of exact names and a tuple of prefixes, so
    each name costs one lookup and one ``startswith`` (every turn filters the whole
    environment)."""

    def __init__(self, patterns: Iterable[str]) -> None:
        listed = tuple(patterns)
        self._exact = frozenset(p for p in listed if not p.endswith("*"))
        self._prefixes = tuple(p[:-1] for p in listed if p.endswith("*"))

    def matches(self, name: str) -> bool:
        return name in self._exact or name.startswith(self._prefixes)


# Never cleared: a pure function of the config's patterns, and a NameMatcher does not
# change. Splitting :data:`CORE_ENV` and the patterns anew cost ~69k instructions a
# turn, a third of filtering the environment itself.
@functools.lru_cache(maxsize=64)
def _matcher(pass_env: tuple[str, ...]) -> NameMatcher:
    """What a config with ``pass_env`` passes on of the environment (with ``CORE_ENV``)."""
    return NameMatcher((*CORE_ENV, *pass_env))


def passed_env(
    inherited_env: Mapping[str, str] | None, inherit_env: bool, pass_env: Iterable[str]
) -> dict[str, str]:
    """Of ``inherited_env`` (None: this process's environment, as it is now), what a
    host config with ``inherit_env`` and ``pass_env`` passes on."""
    source: Mapping[str, str] = os.environ if inherited_env is None else inherited_env
    wanted = _matcher(tuple(pass_env))
    # Names first, then the value of each name passed on: ``os.environ`` decodes a
    # value each time one is asked for, and most of the environment is not passed on.
    names = [name for name in source if inherit_env or wanted.matches(name)]
    # ``get``: a name another thread unsets between the two reads is not passed on.
    values = ((name, source.get(name)) for name in names if name not in CONTROL_PLANE_SECRETS)
    return {name: value for name, value in values if value is not None}


def process_env(
    request: TurnRequest,
    env: dict[str, str],
    inherit_env: bool,
    pass_env: Iterable[str] = (),
) -> dict[str, str]:
    """The process's environment: of the one ``run`` started in, :data:`CORE_ENV` and
    what ``pass_env`` names (everything with ``inherit_env``), never the control plane's
    own credentials; then the config's ``env``, the request's, the turn's tool channel
    (an own agent starts ``turnkeeper mcp`` with it), the turn's markers."""
    base = passed_env(request.inherited_env, inherit_env, pass_env)
    tools = request.tools.env if request.tools is not None else {}
    # The markers go last so neither config nor request can overwrite them.
    return {
        **base,
        **env,
        **request.env,
        **tools,
        MARKER_ENV: request.turn_id,
        SESSION_ENV: request.session_id,
        ATTEMPT_ENV: str(request.attempt),
        TODO_ENV: request.todo_id or "",
    }


# Owned by :func:`unrunnable`, made at import, one per process; anyone may clear it.
# Where each (program, PATH, cwd) was last found runnable. An entry is only a guess to
# check first, never an answer: it is stat-ed and access-checked again, and when it no
# longer runs the whole search is made, so the answer is always the search's (the
# question is whether some candidate runs, not which). Saves a stat per PATH entry
# before the program's on every turn (~11k instructions with it, ~159k without).
_found: Memo[tuple[str, str, str], str] = Memo(
    "where a host's program was found on PATH",
    max_entries=256,
    invalidation="when the path kept no longer runs (checked by unrunnable at each call)",
)


def _runs(candidate: str) -> tuple[bool, bool]:
    """(is a regular file, may be executed by us)."""
    try:
        is_file = stat.S_ISREG(os.stat(candidate).st_mode)
    except OSError:  # absent, or in a directory we may not look into
        return False, False
    return is_file, is_file and os.access(candidate, os.X_OK)


def unrunnable(program: str, search_path: str, cwd: str | Path) -> str | None:
    """Why ``program`` cannot be executed (as ``execvp`` would look for it), or None."""
    # Plain strings, not Path objects: this runs before every turn's spawn.
    here = os.fspath(cwd)
    key = (program, search_path, here)
    known = _found.get(key)
    if known is not None and _runs(known)[1]:
        return None
    if "/" in program:
        candidates = [os.path.join(here, program)]
    else:
        candidates = [os.path.join(here, d or ".", program) for d in search_path.split(os.pathsep)]
    for candidate in candidates:
        is_file, runs = _runs(candidate)
        if runs:
            _found.put(key, candidate)
            return None
        if is_file and "/" in program:
            return f"[Errno 13] Permission denied: {program!r}"
    return f"[Errno 2] No such file or directory: {program!r}"
