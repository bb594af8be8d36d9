"""JSON as Python types: what a value read from, or written as, JSON may be.

One definition for every layer, so a JSON payload is typed the same in the hosts, the
store, the runtime and the API, and ``Any`` is left for the few places where a value
arrives from outside before anything has looked at it. ``JsonValue`` is pydantic's
recursive union (a dict, list, str, bool, int, float or None, all the way down); code
that reads a field narrows it with ``isinstance`` or validates it into a model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import JsonValue

JsonDict = dict[str, JsonValue]
JsonList = list[JsonValue]
# What a function that only reads a JSON object accepts: a ``dict[str, str]`` is one.
JsonMapping = Mapping[str, JsonValue]


def json_object(text: str | bytes) -> JsonDict:
    """``text`` decoded, when it is a JSON object; ValueError when it is not JSON or
    not an object (a record that is always one: a run's line, a settings file)."""
    data: JsonValue = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object: {str(text)[:200]!r}")
    return data


__all__ = ["JsonDict", "JsonList", "JsonMapping", "JsonValue", "json_object"]
