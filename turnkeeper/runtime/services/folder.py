"""The one :class:`KernelFolder` that knows every stream kind of this version."""

from __future__ import annotations

from turnkeeper.runtime.log.codec import KernelFolder
from turnkeeper.runtime.services.access import ACCESS_CODEC
from turnkeeper.runtime.services.extension_settings import EXTENSIONS_CODEC
from turnkeeper.runtime.services.goals import GOAL_CODEC, index_entries
from turnkeeper.runtime.services.sessions import SESSION_CODEC, session_index


def kernel_folder() -> KernelFolder:
    # The access stream (API tokens and shares) and the extension settings are
    # verified and repaired like the rest.
    return KernelFolder(
        [GOAL_CODEC, SESSION_CODEC, ACCESS_CODEC, EXTENSIONS_CODEC],
        indexers={GOAL_CODEC.kind: index_entries, SESSION_CODEC.kind: session_index},
    )
