"""Secrets kept out of a session's stored configuration.

A session's host configuration (and the effect providers' section in it) is recorded
in the event log as given, shown by ``session show``, returned by the API and drawn in
the web view. A secret value in it — an ``env`` entry holding an API key, a header
carrying a bearer token — would be all of those. So a configuration is refused
(``INVALID_ARGUMENT``, ``secret_in_config``) before anything is written when:

* any string in it has a credential's shape (the boundary's credential rules: API
  keys, tokens, private keys, a password in a URL), whatever its name; or
* an entry of an ``env`` or ``headers`` object whose name is a secret's (``*KEY*``,
  ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ``Authorization``, ...) holds a value
  other than a reference to where the secret is kept (a file's path).

The refusal names the field, never the value, and says what to do instead: a key
exported where ``turnkeeper run`` starts and named in the config's ``pass_env``
reaches the agent without being stored; an ``http`` effect takes a header from an
environment variable (``header_env``), by name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from turnkeeper.boundary.rules import Kind, scan_value
from turnkeeper.errors import InvalidArgument

# Names whose value is a secret, wherever a configuration sets one.
SECRET_NAME = re.compile(
    r"(?i)(api[_-]?key|access[_-]?key|secret|token|passw(or)?d|passphrase|credential"
    r"|^authorization$|^proxy-authorization$|^cookie$|private[_-]?key)"
)
# The objects whose entries are sent as they are (an environment, HTTP headers).
_NAMED_VALUES = frozenset({"env", "headers"})
_MAX_DEPTH = 64  # configurations are small; deeper is refused as malformed elsewhere


def check_config_has_no_secrets(config: object, where: str = "host config") -> None:
    """Refuse ``config`` (a JSON value) if it holds a secret value; see the module."""
    for field, why in _secrets(config):
        raise InvalidArgument(
            f"{where} field {field} holds {why}; it would be stored in the event log "
            "and shown by session show and the API, so it is refused. Leave the value "
            "out: export it where `turnkeeper run` starts and name it in pass_env, or, "
            "for an http effect's header, name the variable in header_env",
            reason="secret_in_config",
            details={"field": field},
        )


def secret_fields(config: object) -> list[tuple[str, str]]:
    """(field path, what it holds) of every secret value in ``config``: what a
    configuration stored before these refusals existed may still hold."""
    return list(_secrets(config))


def _secrets(config: object) -> Iterator[tuple[str, str]]:
    """(field path, what it holds) for every secret value, in document order."""
    # (field path, value, the name of the object holding it, its own name, depth)
    stack: list[tuple[str, object, str, str, int]] = [("", config, "", "", 0)]
    while stack:
        path, value, holder, name, depth = stack.pop()
        if isinstance(value, str):
            credential = next((f for f in scan_value(value) if f.kind is Kind.CREDENTIAL), None)
            if credential is not None:
                yield path or "(config)", f"a credential ({credential.what})"
            elif holder in _NAMED_VALUES and SECRET_NAME.search(name) and not _is_reference(value):
                yield path, "a value under a secret's name"
        elif isinstance(value, dict) and depth < _MAX_DEPTH:
            for raw_key, item in reversed(list(value.items())):
                key = str(raw_key)
                child = f"{path}.{key}" if path else key
                stack.append((child, item, name, key, depth + 1))
        elif isinstance(value, list) and depth < _MAX_DEPTH:
            for index in reversed(range(len(value))):
                stack.append((f"{path}[{index}]", value[index], "", name, depth + 1))


def _is_reference(value: str) -> bool:
    """Empty, or where a secret is kept rather than the secret: a file's path
    (``GOOGLE_APPLICATION_CREDENTIALS=/etc/...``)."""
    return not value or value.startswith(("/", "~/", "./", "../"))
