"""Helpers the built-in providers share: config validation and output decoding."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TypeVar

from pydantic import BaseModel, JsonValue, ValidationError

from turnkeeper.errors import InvalidArgument

MAX_OUTPUT_BYTES = 4_096  # what a provider keeps of a response or a command's stdout

ModelT = TypeVar("ModelT", bound=BaseModel)


def validate_config(model: type[ModelT], kind: str, config: Mapping[str, object]) -> ModelT:
    try:
        return model.model_validate(config)
    except ValidationError as exc:
        raise InvalidArgument(
            f"effect provider {kind!r}: invalid config ({exc.error_count()} errors)",
            reason="invalid_effect_config",
            details={"errors": exc.errors(include_url=False, include_context=False)},
        ) from exc


def decode_output(data: bytes) -> JsonValue:
    """JSON when the output is JSON, else the text; cut to :data:`MAX_OUTPUT_BYTES`."""
    text = data[:MAX_OUTPUT_BYTES].decode("utf-8", errors="replace")
    if len(data) <= MAX_OUTPUT_BYTES:
        try:
            value: JsonValue = json.loads(text)
        except ValueError:
            return text.strip()
        return value
    return text.strip() + " [truncated]"


def substitute(template: str, key: str) -> str:
    """``{key}`` in ``template`` replaced (only that placeholder: other braces stay)."""
    return template.replace("{key}", key)
