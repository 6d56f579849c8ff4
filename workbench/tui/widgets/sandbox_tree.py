"""The sidebar: profile → sandboxes → code contexts and the /workspace tree."""

from __future__ import annotations

import re

from rich.text import Text, TextType
from textual.widgets import Tree
from textual.widgets.tree import NodeID, TreeNode

from workbench.api import FileInfo, SandboxInfo, SandboxSummary, short_id
from workbench.api.display import human_bytes
from workbench.tui.tree_nodes import (
    ContextNode,
    DirectoryNode,
    FileNode,
    SandboxNode,
    TreeNodeData,
)
from workbench.tui.untrusted import cut, one_line, shown_text
from workbench.tui.workspace_paths import WORKSPACE, is_within, parent_path

DIGIT_RUNS = re.compile(r"([0-9]+)")


def natural_key(name: str) -> tuple[tuple[str | tuple[int, str], ...], str]:
    """Sort key of a workspace name: case-insensitive, runs of digits compared as numbers
    (`f2` before `f10`), ties broken by the exact name. A run is compared by its length
    without leading zeros, then its digits: no `int()` of a name's arbitrary digits."""
    pieces: list[str | tuple[int, str]] = []
    for index, piece in enumerate(DIGIT_RUNS.split(name)):
        # `split` with a group alternates text and digits, text first: the types match
        # position by position between any two keys.
        if index % 2:
            digits = piece.lstrip("0")
            pieces.append((len(digits), digits))
        else:
            pieces.append(piece.casefold())
    return tuple(pieces), name


def entry_data(sandbox_id: str, entry: FileInfo) -> DirectoryNode | FileNode:
    if entry.is_directory:
        return DirectoryNode(sandbox_id, entry.absolute_path)
    return FileNode(sandbox_id, entry.absolute_path)


LABEL_CHARS = 256
"""Characters of a name a label shows: a gateway's name of a MiB made each paint of the
tree take about a second (a helper)."""


def entry_label(entry: FileInfo) -> Text:
    """The entry's name escaped before Rich sees it (a `Text` drops BEL, backspace and
    CR, so `dup\a.txt` and `dup.txt` showed alike; QA), cut to `LABEL_CHARS`."""
    name = one_line(cut(entry.name, LABEL_CHARS))
    if entry.is_directory:
        return Text(name + "/", style="yellow")
    return Text.assemble(name, (f"  {human_bytes(entry.size)}", "dim"))


class SandboxTree(Tree[TreeNodeData]):
    """Sandboxes load their contexts and workspace when expanded; directories list
    their entries lazily (one `list_files` per directory)."""

    HELP = """\
## Sandboxes

The current profile's sandboxes. Expand a sandbox to see its code contexts
(binding, cwd, runs, snapshot) and its `/workspace`. **Enter** on a context opens
its REPL; on a file, its editor; on a sandbox, its info. While the tree has the
focus, **F3**, **F4**, **F6** and **F8** act on the sandbox under the cursor.

In `/workspace`: **alt+n** new file, **alt+t** new folder (in the selected folder),
**alt+e** rename, **alt+x** delete (asks first; a folder goes with everything in it).
Expanded folders are listed again after each run, sync, change and refresh (**F5**),
and stay expanded. In a sandbox another client destroyed, expanding, Enter and these
keys do nothing (their requests would make it again, empty): they say it is gone, and
the tree drops it.
"""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("local", id=id)
        self.cursor_wanted: tuple[str, str] | None = None
        """The sandbox and path of a node the cursor goes to once a listing adds it (a
        file or folder just made or renamed)."""
        self.show_root = True
        self.guide_depth = 3
        self._expanded_here: set[NodeID] = set()
        """Nodes the tree expanded itself whose `NodeExpanded` is not handled yet."""
        self.expand_wanted: dict[str, set[str]] = {}
        """Directories of each sandbox to expand once a listing shows them: the tree as
        the last session left it (`restore_expanded`)."""

    def expand_here(self, node: TreeNode[TreeNodeData]) -> None:
        """Expand `node` to show what was just read (not a user's expansion, which reads
        it: `expanded_by_user`)."""
        self._expanded_here.add(node.id)
        node.expand()

    def expanded_by_user(self, node: TreeNode[TreeNodeData]) -> bool:
        """Whether a `NodeExpanded` of `node` is the user's (a key, a click) rather than
        the tree's own (`expand_here`); asked once per such message."""
        if node.id in self._expanded_here:
            self._expanded_here.discard(node.id)
            return False
        return True

    def sandbox_ids(self) -> set[str]:
        """The sandboxes the tree shows."""
        nodes = self.root.children
        return {node.data.sandbox_id for node in nodes if isinstance(node.data, SandboxNode)}

    def expanded_sandbox_ids(self) -> list[str]:
        """The sandboxes the tree shows expanded."""
        return [
            node.data.sandbox_id
            for node in self.root.children
            if isinstance(node.data, SandboxNode) and node.is_expanded
        ]

    def expanded_sandboxes(self) -> dict[str, list[str]]:
        """Each expanded sandbox with its expanded directories (for the next session)."""
        return {
            sandbox_id: self.expanded_directories(sandbox_id)
            for sandbox_id in self.expanded_sandbox_ids()
        }

    def restore_expanded(self, expanded: dict[str, list[str]]) -> None:
        """Expand the sandboxes of `expanded` the tree shows (the caller reads their info),
        and their directories as listings show them (`show_sandbox_info`,
        `show_directory`)."""
        self.expand_wanted.clear()
        for sandbox_id, paths in expanded.items():
            node = self.sandbox_node(sandbox_id)
            if node is None:
                continue
            self.expand_wanted[sandbox_id] = set(paths)
            if not node.is_expanded:
                self.expand_here(node)

    def _forget_unlisted(
        self, sandbox_id: str, path: str, listed: list[DirectoryNode | FileNode]
    ) -> None:
        """Drop the directories to expand again that `path`'s listing shows gone (with
        what was under them): one made again later is not the user's to see expanded."""
        wanted = self.expand_wanted.get(sandbox_id)
        if not wanted:
            return
        present = {data.path for data in listed if isinstance(data, DirectoryNode)}
        for missing in [item for item in wanted if parent_path(item) == path]:
            if missing not in present:
                wanted -= {item for item in wanted if is_within(item, missing)}

    def _expand_if_wanted(self, node: TreeNode[TreeNodeData]) -> bool:
        """Expand `node`, a directory just shown, when the last session had it expanded;
        whether it did (the caller lists it)."""
        data = node.data
        if not isinstance(data, DirectoryNode):
            return False
        wanted = self.expand_wanted.get(data.sandbox_id)
        if wanted is None or data.path not in wanted:
            return False
        wanted.discard(data.path)
        self.expand_here(node)
        return True

    def move_cursor(self, node: TreeNode[TreeNodeData] | None, animate: bool = False) -> None:
        """Textual's moves to the line the node had when the lines were last built (on
        idle), which a node added since does not have yet: build them first."""
        _ = self.last_line
        super().move_cursor(node, animate)

    def process_label(self, label: TextType) -> Text:
        """Every label (ids, context details and file names come from the backend):
        control characters, tab and newline too, shown as `\\xNN`."""
        text = Text.from_markup(label) if isinstance(label, str) else label
        # Before Textual's, which keeps only a label's first line.
        return super().process_label(shown_text(text, on_one_line=True))

    def show_profile(self, profile: str) -> None:
        self.clear()  # which numbers the nodes from 0 again: no mark may stay
        self._expanded_here.clear()
        self.expand_wanted.clear()
        self.root.set_label(Text.assemble(("⚙ ", "dim"), (profile, "bold")))
        self.root.expand()

    def show_sandboxes(self, sandboxes: list[SandboxSummary]) -> None:
        """The profile's sandboxes, merged into the tree: the nodes of sandboxes still
        there stay as they are (expanded, with their contexts, their `/workspace` and its
        expanded folders, and the cursor), new ones are added in order, gone ones removed."""
        under_cursor = self.selected_sandbox_id
        kept: dict[str, TreeNode[TreeNodeData]] = {}
        for node in list(self.root.children):
            if isinstance(node.data, SandboxNode):
                kept[node.data.sandbox_id] = node
            else:
                node.remove()  # "no sandboxes"
        wanted = sorted({summary.id for summary in sandboxes})
        for sandbox_id in set(kept) - set(wanted):
            kept.pop(sandbox_id).remove()
        for index, sandbox_id in enumerate(wanted):
            if sandbox_id in kept:
                continue
            label = Text.assemble(("▣ ", "cyan"), one_line(cut(sandbox_id, LABEL_CHARS)))
            node = self.root.add(label, SandboxNode(sandbox_id), before=index)
            node.add_leaf(Text("loading…", style="dim"))
        if not sandboxes:
            self.root.add_leaf(Text("no sandboxes (F2 creates one)", style="dim"))
        if under_cursor is not None and under_cursor not in wanted:
            self._cursor_after(under_cursor)

    def _cursor_after(self, gone: str) -> None:
        """The cursor was in the sandbox `gone`, just removed: put it on the sandbox after
        it (else the last one, else the root), saying so (`NodeHighlighted`). Textual
        would leave it on the removed node when the line number stays the same."""
        remaining = [node for node in self.root.children if isinstance(node.data, SandboxNode)]
        after = [node for node in remaining if node.data and node.data.sandbox_id > gone]
        target = after[0] if after else remaining[-1] if remaining else self.root
        self.cursor_line = -1
        self.move_cursor(target)

    def sandbox_node(self, sandbox_id: str) -> TreeNode[TreeNodeData] | None:
        for node in self.root.children:
            if isinstance(node.data, SandboxNode) and node.data.sandbox_id == sandbox_id:
                return node
        return None

    def show_info_failed(self, sandbox_id: str) -> None:
        """A sandbox whose info never loaded folds again (Enter asks again): it said
        "loading…" for ever, and, kept expanded, failed anew at each refresh and start
        (a remote sandbox named `..`; QA)."""
        node = self.sandbox_node(sandbox_id)
        if node is None or any(isinstance(child.data, DirectoryNode) for child in node.children):
            return  # its info was shown once: it stays as it was
        self.expand_wanted.pop(sandbox_id, None)
        node.collapse()

    def show_sandbox_info(self, info: SandboxInfo) -> list[str]:
        """The sandbox's contexts, and its `/workspace` (kept as it is, expanded
        directories and all, once it is there); the directories it expanded, for the
        caller to list (`expand_wanted`)."""
        node = self.sandbox_node(info.id)
        if node is None:
            return []
        workspace = next((c for c in node.children if isinstance(c.data, DirectoryNode)), None)
        for child in list(node.children):
            if child is not workspace:
                child.remove()
        label = Text(f"contexts ({len(info.contexts)})", style="bold")
        contexts = node.add(label, None, before=workspace)
        for context in info.contexts:
            snapshot = ""
            if context.snapshot is not None:
                snapshot = f" ◆{human_bytes(context.snapshot.stored_bytes)}"
            # The id first: a narrow sidebar (80 columns) cuts what follows, and the id
            # is what `--context` takes.
            label = Text.assemble(
                ("λ ", "magenta"),
                f"{one_line(short_id(context.id))} ",
                (one_line(context.binding), "bold"),
                (f" {one_line(context.cwd)} runs {context.executions}{snapshot}", "dim"),
                (" local only" if context.local_only else "", "yellow"),
            )
            contexts.add_leaf(label, ContextNode(info.id, context))
        if not info.contexts:
            contexts.add_leaf(Text("none (F3 creates one)", style="dim"))
        contexts.expand()
        expanded: list[str] = []
        if workspace is None:
            workspace = node.add(
                Text(WORKSPACE + "/", style="yellow"), DirectoryNode(info.id, WORKSPACE)
            )
            workspace.add_leaf(Text("loading…", style="dim"))
            if self._expand_if_wanted(workspace):
                expanded.append(WORKSPACE)
        if not node.is_expanded:
            self.expand_here(node)
        return expanded

    def show_directory(self, sandbox_id: str, path: str, files: list[FileInfo]) -> list[str]:
        """The directory's entries, merged into its node: the nodes of entries still there
        stay (expanded, with their children and the cursor), new ones are added in order;
        the new directories it expanded, for the caller to list (`expand_wanted`)."""
        directory = self._directory_node(self.root, sandbox_id, path)
        if directory is None:
            return []
        expanded: list[str] = []
        kept: dict[TreeNodeData, TreeNode[TreeNodeData]] = {}
        for child in list(directory.children):
            if isinstance(child.data, DirectoryNode | FileNode):
                kept[child.data] = child
            else:
                child.remove()  # "loading…" or "empty"
        # Folders first, each group in natural order (for display: the API keeps its order).
        listed = sorted(files, key=lambda item: (not item.is_directory, natural_key(item.name)))
        wanted = [entry_data(sandbox_id, entry) for entry in listed]
        for data in set(kept) - set(wanted):
            kept.pop(data).remove()
        selected: TreeNode[TreeNodeData] | None = None
        for index, (entry, data) in enumerate(zip(listed, wanted, strict=True)):
            label = entry_label(entry)
            node = kept.get(data)
            if node is not None:
                node.set_label(label)
                continue
            if isinstance(data, DirectoryNode):
                node = directory.add(label, data, before=index)
                node.add_leaf(Text("loading…", style="dim"))
                if self._expand_if_wanted(node):
                    expanded.append(data.path)
            else:
                node = directory.add_leaf(label, data, before=index)
            if (data.sandbox_id, data.path) == self.cursor_wanted:
                self.cursor_wanted = None
                selected = node
        if not files:
            directory.add_leaf(Text("empty", style="dim"))
        self._forget_unlisted(sandbox_id, path, wanted)
        if selected is not None:
            # Now, in the handler that adds the node: a move after the next refresh would
            # take the cursor from wherever the user put it in between.
            self.move_cursor(selected)
        return expanded

    def select_when_listed(self, sandbox_id: str, path: str) -> None:
        """Move the cursor to the node of the sandbox's `path` once a listing adds it, its
        directory expanded (the caller lists the expanded directories)."""
        self.cursor_wanted = (sandbox_id, path)
        directory = self._directory_node(self.root, sandbox_id, parent_path(path))
        while directory is not None and isinstance(directory.data, DirectoryNode):
            if not directory.is_expanded:
                self.expand_here(directory)
            directory = directory.parent
        # Its sandbox too: the caller lists only the folders of an expanded sandbox (else
        # they stayed "loading…").
        if directory is None or directory.is_expanded:
            return
        if isinstance(directory.data, SandboxNode):
            self.expand_here(directory)

    def expanded_directories(self, sandbox_id: str) -> list[str]:
        """The sandbox's workspace directories the tree shows expanded, parents first."""
        sandbox = self.sandbox_node(sandbox_id)
        found: list[str] = []
        pending = list(sandbox.children) if sandbox is not None and sandbox.is_expanded else []
        while pending:
            node = pending.pop(0)
            if isinstance(node.data, DirectoryNode) and node.is_expanded:
                found.append(node.data.path)
                pending.extend(node.children)
        return found

    @property
    def workspace_selection(self) -> DirectoryNode | FileNode | None:
        """The workspace directory or file the cursor is on."""
        node = self.cursor_node
        data = node.data if node is not None else None
        return data if isinstance(data, DirectoryNode | FileNode) else None

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
