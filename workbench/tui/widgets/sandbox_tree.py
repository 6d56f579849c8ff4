"""The sidebar: profile → sandboxes → code contexts and the /workspace tree."""

from __future__ import annotations

from rich.text import Text, TextType
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from workbench.api import FileInfo, SandboxInfo, SandboxSummary
from workbench.tui.formatting import human_bytes, short_id
from workbench.tui.tree_nodes import (
    ContextNode,
    DirectoryNode,
    FileNode,
    SandboxNode,
    TreeNodeData,
)
from workbench.tui.untrusted import shown_text

WORKSPACE = "/workspace"


class SandboxTree(Tree[TreeNodeData]):
    """Sandboxes load their contexts and workspace when expanded; directories list
    their entries lazily (one `list_files` per directory)."""

    HELP = """\
## Sandboxes

The current profile's sandboxes. Expand a sandbox to see its code contexts
(binding, cwd, runs, snapshot) and its `/workspace`. **Enter** on a context opens
its REPL; on a sandbox it shows its info.
"""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("local", id=id)
        self.show_root = True
        self.guide_depth = 3

    def process_label(self, label: TextType) -> Text:
        """Every label (ids, context details and file names come from the backend):
        control characters shown as `\\xNN`."""
        return shown_text(super().process_label(label))

    def show_profile(self, profile: str) -> None:
        self.clear()
        self.root.set_label(Text.assemble(("⚙ ", "dim"), (profile, "bold")))
        self.root.expand()

    def show_sandboxes(self, sandboxes: list[SandboxSummary]) -> None:
        expanded = {
            node.data.sandbox_id
            for node in self.root.children
            if isinstance(node.data, SandboxNode) and node.is_expanded
        }
        self.root.remove_children()
        for summary in sorted(sandboxes, key=lambda item: item.id):
            node = self.root.add(Text.assemble(("▣ ", "cyan"), summary.id), SandboxNode(summary.id))
            node.add_leaf(Text("loading…", style="dim"))
            if summary.id in expanded:
                node.expand()
        if not sandboxes:
            self.root.add_leaf(Text("no sandboxes yet (F2 creates one)", style="dim"))

    def sandbox_node(self, sandbox_id: str) -> TreeNode[TreeNodeData] | None:
        for node in self.root.children:
            if isinstance(node.data, SandboxNode) and node.data.sandbox_id == sandbox_id:
                return node
        return None

    def show_sandbox_info(self, info: SandboxInfo) -> None:
        node = self.sandbox_node(info.id)
        if node is None:
            return
        node.remove_children()
        contexts = node.add(Text(f"contexts ({len(info.contexts)})", style="bold"), None)
        for context in info.contexts:
            snapshot = ""
            if context.snapshot is not None:
                snapshot = f" ◆{human_bytes(context.snapshot.stored_bytes)}"
            label = Text.assemble(
                ("λ ", "magenta"),
                (context.binding, "bold"),
                f" {short_id(context.id)} ",
                (f"{context.cwd} runs {context.executions}{snapshot}", "dim"),
                (" local only" if context.local_only else "", "yellow"),
            )
            contexts.add_leaf(label, ContextNode(info.id, context))
        if not info.contexts:
            contexts.add_leaf(Text("none (F3 creates one)", style="dim"))
        contexts.expand()
        workspace = node.add(
            Text(WORKSPACE + "/", style="yellow"), DirectoryNode(info.id, WORKSPACE)
        )
        workspace.add_leaf(Text("loading…", style="dim"))
        if not node.is_expanded:
            node.expand()

    def show_directory(self, sandbox_id: str, path: str, files: list[FileInfo]) -> None:
        directory = self._directory_node(self.root, sandbox_id, path)
        if directory is None:
            return
        # A refresh (e.g. after a folder-watch sync) keeps open subdirectories open:
        # expanding them again lists them again.
        reopen = {
            child.data.path
            for child in directory.children
            if isinstance(child.data, DirectoryNode) and child.is_expanded
        }
        directory.remove_children()
        for entry in sorted(files, key=lambda item: (not item.is_directory, item.name)):
            if entry.is_directory:
                child = directory.add(
                    Text(entry.name + "/", style="yellow"),
                    DirectoryNode(sandbox_id, entry.absolute_path),
                )
                child.add_leaf(Text("loading…", style="dim"))
                if entry.absolute_path in reopen:
                    child.expand()
            else:
                directory.add_leaf(
                    Text.assemble(entry.name, (f"  {human_bytes(entry.size)}", "dim")),
                    FileNode(sandbox_id, entry.absolute_path),
                )
        if not files:
            directory.add_leaf(Text("empty", style="dim"))

    def is_directory_expanded(self, sandbox_id: str, path: str) -> bool:
        node = self._directory_node(self.root, sandbox_id, path)
        return node is not None and node.is_expanded

    def _directory_node(
        self, node: TreeNode[TreeNodeData], sandbox_id: str, path: str
    ) -> TreeNode[TreeNodeData] | None:
        if node.data == DirectoryNode(sandbox_id, path):
            return node
        for child in node.children:
            found = self._directory_node(child, sandbox_id, path)
            if found is not None:
                return found
        return None

    @property
    def selected_sandbox_id(self) -> str | None:
        node = self.cursor_node
        while node is not None:
            if isinstance(node.data, SandboxNode):
                return node.data.sandbox_id
            if node.data is not None:
                return node.data.sandbox_id
            node = node.parent
        return None
