"""A doctor finding: one check of one extension, its status and, for a problem, the fix."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Status = Literal["ok", "missing", "wrong_version", "no_key", "invalid_config", "load_failed"]


class Finding(BaseModel):
    model_config = ConfigDict(frozen=True)

    extension: str
    check: str
    status: Status
    detail: str
    # What to do about it; empty when the status is ok.
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"
