"""The public/private boundary: what a repository must never publish, and the scan
that finds it (credentials, local paths, transcripts, private links, turnkeeper's
runtime state) before git commits it. See docs/boundary.md.

``scan_text(name, text)`` checks one file's text; ``scan_value(text)`` one string that
is no file (each value of a handoff packet before it is written);
``scan_paths(root, paths)`` files on disk; ``scan_index(root)`` what git would commit.
"""

from __future__ import annotations

from turnkeeper.boundary.allow_list import (
    ALLOW_LIST_NAME,
    AllowedFinding,
    AllowEntry,
    AllowList,
    load_allow_list,
    parse_allow_list,
)
from turnkeeper.boundary.rules import (
    ENTROPY_THRESHOLD,
    Finding,
    Kind,
    scan_value,
    shannon_entropy,
)
from turnkeeper.boundary.scanner import (
    MAX_SCAN_BYTES,
    ScanReport,
    repository_root,
    scan_index,
    scan_paths,
    scan_text,
)

__all__ = [
    "ALLOW_LIST_NAME",
    "ENTROPY_THRESHOLD",
    "MAX_SCAN_BYTES",
    "AllowEntry",
    "AllowList",
    "AllowedFinding",
    "Finding",
    "Kind",
    "ScanReport",
    "load_allow_list",
    "parse_allow_list",
    "repository_root",
    "scan_index",
    "scan_paths",
    "scan_text",
    "scan_value",
    "shannon_entropy",
]
