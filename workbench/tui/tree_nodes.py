"""What each sidebar tree node stands for."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.api.types import ContextInfo


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
