"""This process's environment, read without a raised ``KeyError`` per name that is unset.

``name in os.environ`` and ``os.environ.get(name)`` raise and catch a ``KeyError`` —
twice: ``__getitem__`` raises it again with the name — for every name that is not
set, which costs about what five ``stat`` calls do. Every turn asks for names that
are rarely set (git's discovery variables, ``XDG_CONFIG_HOME``), so they are looked
up in ``os.environ``'s own table of encoded names and values, which ``os.environ``
keeps in step with every change made through it, by ``os.environ``'s own encoding of
a name and decoding of a value. Where there is no such table (a test that put a
plain mapping in place of ``os.environ``), ``os.environ`` itself is asked.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from collections.abc import Callable


def _table() -> tuple[dict[object, object], os._Environ[str]] | None:
    """``os.environ``'s table, and ``os.environ`` (read once: a test may replace it)."""
    environ = os.environ
    table: object = getattr(environ, "_data", None)
    if not isinstance(environ, os._Environ) or not isinstance(table, dict):
        return None
    return table, environ


def _keys(environ: os._Environ[str], names: tuple[str, ...]) -> tuple[object, ...]:
    """``names`` in the table's form (encoded by ``os.environ``'s own encoder)."""
    return tuple(environ.encodekey(name) for name in names)


def environ_value(name: str) -> str | None:
    """``os.environ.get(name)``."""
    found = _table()
    if found is None:
        return os.environ.get(name)
    table, environ = found
    raw = table.get(_keys(environ, (name,))[0])
    if raw is None:
        return None
    # The table holds values encoded (bytes on POSIX): os.environ's own decoder.
    decode = cast("Callable[[object], str]", environ.decodevalue)
    return decode(raw)


def environ_has_any(names: tuple[str, ...]) -> bool:
    """``any(name in os.environ for name in names)``."""
    found = _table()
    if found is None:
        return any(name in os.environ for name in names)
    table, environ = found
    return not table.keys().isdisjoint(_keys(environ, names))


def environ_raw(names: tuple[str, ...]) -> tuple[object, ...]:
    """The values of ``names`` as ``os.environ``'s own table holds them (None for a name
    that is unset), undecoded: to tell whether they are what they were at an earlier
    reading, not to use. Decoded values where there is no such table."""
    found = _table()
    if found is None:
        return tuple(os.environ.get(name) for name in names)
    table, environ = found
    return tuple(map(table.get, _keys(environ, names)))
