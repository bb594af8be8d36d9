"""A doctor finding: one check of one extension, its status and, for a problem, the fix;
and an extension's verdict, the sum of its findings."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Status = Literal[
    "ok", "missing", "wrong_version", "no_key", "invalid_config", "load_failed", "secret_in_config"
]
Group = Literal["host", "effect"]  # a host kind, or an effect provider
MAX_DETAIL_CHARS = 500


class Finding(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    extension: str
    check: str
    status: Status
    detail: str
    # What to do about it; empty when the status is ok.
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class ExtensionVerdict(BaseModel):
    """Whether one extension is ready on the machine doctor ran on: ``ok``, or the
    status of its first problem (its sessions' configs aside: those are the sessions')."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    group: Group
    name: str = Field(min_length=1, max_length=200)
    verdict: Status
    problems: int = Field(ge=0)
    detail: str = Field(default="", max_length=MAX_DETAIL_CHARS)  # the first problem's
