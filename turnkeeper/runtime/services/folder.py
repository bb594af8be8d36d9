"""The one :class:`KernelFolder` that knows every stream kind of this version."""

from __future__ import annotations

from turnkeeper.integrations.langgraph.log import LangGraphThreadFolding
from turnkeeper.notify.records import NotifyFolding
from turnkeeper.runtime.log.codec import KernelFolder, KindFolding
from turnkeeper.runtime.services.access import ACCESS_CODEC
from turnkeeper.runtime.services.extension_settings import EXTENSIONS_CODEC
from turnkeeper.runtime.services.goals import GOAL_CODEC, index_entries
from turnkeeper.runtime.services.sessions import SESSION_CODEC, session_index


def kernel_folder() -> KernelFolder:
    # The access stream (API tokens and shares), the extension settings and the
    # notifications' endpoints and cursors, and the LangGraph saver's threads
    # (docs/langgraph.md) are verified and repaired like the rest.
    return KernelFolder(
        [
            KindFolding(GOAL_CODEC, index_entries),
            KindFolding(SESSION_CODEC, session_index),
            KindFolding(ACCESS_CODEC),
            KindFolding(EXTENSIONS_CODEC),
            NotifyFolding(),
            LangGraphThreadFolding(),
        ]
    )
