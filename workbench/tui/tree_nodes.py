"""What each sidebar tree node stands for."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.api import CodeContext, ContextInfo


@dataclass(frozen=True)
class SandboxNode:
    sandbox_id: str


@dataclass(frozen=True)
class ContextNode:
    sandbox_id: str
    context: ContextInfo


@dataclass(frozen=True)
class DirectoryNode:
    sandbox_id: str
    path: str


@dataclass(frozen=True)
class FileNode:
    sandbox_id: str
    path: str


TreeNodeData = SandboxNode | ContextNode | DirectoryNode | FileNode | None


def context_from_info(info: ContextInfo) -> CodeContext:
    """The context a listed `ContextInfo` (a tree node, the palette) opens."""
    return CodeContext(
        info.id,
        info.binding,
        info.language,
        info.cwd,
        info.created_at,
        info.last_used,
        info.start_cwd,
    )
