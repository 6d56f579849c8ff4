"""New file, new folder, rename and delete from the sandbox tree, and the tree listed again
after a run, on real local engines (asserted through the API)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import Input, Static
from textual.widgets.tree import TreeNode

from tests.tui.test_file_editing import listed, write_files
from tests.tui.test_flows import Notifications, make_app
from tour import (
    WorkbenchPilot,
    create_context,
    expanded_workspace,
    run_cell,
    until_connected,
    wait_for,
)
from workbench.api import FileInfo, SandboxInfo, SandboxSummary
from workbench.backends.local import open_local_backend
from workbench.tui.app import WorkbenchApp
from workbench.tui.palette_commands import workbench_commands
from workbench.tui.screens.confirm_screen import ConfirmScreen
from workbench.tui.screens.name_screen import NameScreen
from workbench.tui.tree_nodes import DirectoryNode, FileNode, TreeNodeData
from workbench.tui.widgets.sandbox_tree import SandboxTree

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]


def child(node: TreeNode[TreeNodeData], path: str) -> TreeNode[TreeNodeData] | None:
    for item in node.children:
        if isinstance(item.data, DirectoryNode | FileNode) and item.data.path == path:
            return item
    return None


async def workspace_paths(app: WorkbenchApp) -> set[str]:
    assert app.backend is not None
    listing = await app.backend.sandbox("demo").list_files("/workspace", recursive=True)
    return {entry.absolute_path for entry in listing.files}


async def name_it(pilot: WorkbenchPilot, key: str, name: str, *, clear: bool = False) -> None:
    """`key` opens the name dialog; type `name` (after clearing the proposed one) and Enter."""
    app = pilot.app
    await pilot.press(key)
    await wait_for(pilot, lambda: isinstance(app.screen, NameScreen))
    field = app.screen.query_one("#name-input", Input)
    if clear:
        field.value = ""
    await pilot.press(*name, "enter")
    await wait_for(pilot, lambda: not isinstance(app.screen, NameScreen))


async def test_new_file_folder_rename_and_delete_from_the_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await write_files(tmp_path, {"keep.txt": b"keep"})
    app = make_app(tmp_path)
    notes = Notifications(app, monkeypatch)
    main = app.main_screen
    tree = main.sandbox_tree
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        workspace = await expanded_workspace(pilot, app, "demo")
        tree.focus()
        tree.move_cursor(workspace)

        # On a row they do not apply to, the file keys say what they need (they were
        # silent; QA), and the palette leaves them out.
        tree.move_cursor(tree.root)
        for key in ("alt+n", "alt+e", "alt+x"):
            await pilot.press(key)
        await pilot.pause()
        assert not isinstance(app.screen, NameScreen)
        assert [message for message, title, _ in notes.calls if not title] == [
            "Select a sandbox or a folder of its /workspace in the tree for a new file.",
            "Select a file or folder under /workspace in the tree to rename it.",
            "Select a file or folder under /workspace in the tree to delete it.",
        ]
        titles = {command.title for command in workbench_commands(app)}
        assert (
            not {"New file in the selected folder…", "Rename the selected file or folder…"} & titles
        )
        tree.move_cursor(workspace)

        # A name with a slash or `..` is refused as typed; the dialog names the sandbox.
        await pilot.press("alt+n")
        await wait_for(pilot, lambda: isinstance(app.screen, NameScreen))
        dialog = app.screen
        assert dialog.title_text == "New file in /workspace/ of demo"
        await pilot.press(*"../x")
        assert "no /" in str(dialog.query_one("#name-problem", Static).render())
        assert dialog.query_one("#accept").disabled
        dialog.query_one("#name-input", Input).value = ".."
        await pilot.pause()
        assert dialog.query_one("#accept").disabled
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, NameScreen))

        # New file: created, opened in a view whose editor takes what is typed next,
        # selected in the tree.
        await name_it(pilot, "alt+n", "new.py")
        await wait_for(pilot, lambda: main.tabs.file_view("demo", "/workspace/new.py"))
        created = main.tabs.file_view("demo", "/workspace/new.py")
        assert created is not None
        await wait_for(pilot, lambda: app.focused is created.editor)
        await pilot.press(*"x = 1")
        assert created.editor.text == "x = 1" and created.is_dirty
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not created.is_dirty)
        assert app.backend is not None
        assert await app.backend.sandbox("demo").read_bytes("/workspace/new.py") == b"x = 1"
        await wait_for(pilot, lambda: child(workspace, "/workspace/new.py") is not None)
        # An existing name is refused by the API, and nothing is overwritten.
        tree.focus()
        tree.move_cursor(workspace)
        await name_it(pilot, "alt+n", "keep.txt")
        await wait_for(pilot, lambda: bool(notes.errors()))
        assert notes.errors() == [
            "Creating /workspace/keep.txt failed: /workspace/keep.txt exists already"
        ]
        assert app.backend is not None
        assert await app.backend.sandbox("demo").read_bytes("/workspace/keep.txt") == b"keep"
        # A new folder of that name is refused in the same words (QA: a raw API error).
        tree.move_cursor(workspace)
        await name_it(pilot, "alt+t", "keep.txt")
        await wait_for(pilot, lambda: len(notes.errors()) == 2)
        assert notes.errors()[1] == (
            "Creating /workspace/keep.txt failed: /workspace/keep.txt exists already"
        )

        # New folder, then rename the open file: its tab follows.
        await name_it(pilot, "alt+t", "src")
        await wait_for(pilot, lambda: child(workspace, "/workspace/src") is not None)
        assert "/workspace/src" in await workspace_paths(app)
        node = child(workspace, "/workspace/new.py")
        assert node is not None
        tree.move_cursor(node)
        await name_it(pilot, "alt+e", "renamed.py", clear=True)
        await wait_for(pilot, lambda: child(workspace, "/workspace/renamed.py") is not None)
        assert "/workspace/renamed.py" in (paths := await workspace_paths(app))
        assert "/workspace/new.py" not in paths
        view = main.tabs.file_view("demo", "/workspace/renamed.py")
        assert view is not None and main.tabs.file_view("demo", "/workspace/new.py") is None
        tab_titles = [str(tab.label) for tab in main.tabs.query("ContentTab")]
        assert "renamed.py" in tab_titles and "new.py" not in tab_titles
        # Renaming onto an existing file is refused, said plainly, and replaces nothing.
        node = child(workspace, "/workspace/renamed.py")
        assert node is not None
        tree.focus()
        tree.move_cursor(node)
        await name_it(pilot, "alt+e", "keep.txt", clear=True)
        await wait_for(pilot, lambda: len(notes.errors()) == 3)
        assert notes.errors()[-1] == (
            "Renaming /workspace/renamed.py failed: /workspace/keep.txt exists already: "
            "rename or delete it first"
        )
        assert await app.backend.sandbox("demo").read_bytes("/workspace/keep.txt") == b"keep"

        # Delete asks first: cancelling changes nothing.
        await wait_for(pilot, lambda: tree.cursor_node is not None)
        node = child(workspace, "/workspace/renamed.py")
        assert node is not None
        tree.focus()
        tree.move_cursor(node)
        await pilot.press("alt+x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.click("#cancel")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert "/workspace/renamed.py" in await workspace_paths(app)
        await pilot.press("alt+x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.click("#confirm")
        await wait_for(pilot, lambda: child(workspace, "/workspace/renamed.py") is None)
        assert "/workspace/renamed.py" not in await workspace_paths(app)
        await wait_for(pilot, lambda: view.gone)  # its open view says so

        # A folder's delete says it is recursive.
        await app.backend.sandbox("demo").write_file("/workspace/src/inner.txt", "in")
        folder = child(workspace, "/workspace/src")
        assert folder is not None
        tree.move_cursor(folder)
        await pilot.press("alt+x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        question = str(app.screen.query_one(".dialog-question", Static).render())
        assert "recursively" in question and "/workspace/src" in question
        await pilot.click("#confirm")
        await wait_for(pilot, lambda: child(workspace, "/workspace/src") is None)
        assert not {"/workspace/src", "/workspace/src/inner.txt"} & await workspace_paths(app)


async def test_tree_operations_in_a_sandbox_another_client_destroyed_make_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new file or folder in a sandbox another client destroyed made it again, empty but
    for it, and a rename or a delete made it again and then failed: now each says the
    sandbox is gone, the tree drops it, and nothing is made."""
    await write_files(tmp_path, {"keep.txt": b"keep"})
    app = make_app(tmp_path)
    notes = Notifications(app, monkeypatch)
    main = app.main_screen
    tree = main.sandbox_tree
    gone = (
        "sandbox demo is gone (another client destroyed it, or it expired), so nothing was "
        "done: that would have made it again, empty"
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        workspace = await expanded_workspace(pilot, app, "demo")
        tree.focus()
        tree.move_cursor(workspace)
        assert app.backend is not None
        await app.backend.sandbox("demo").destroy()  # another client
        await name_it(pilot, "alt+n", "new.txt")
        await wait_for(pilot, lambda: bool(notes.errors()))
        assert notes.errors() == [f"Creating /workspace/new.txt failed: {gone}"]
        await wait_for(pilot, lambda: tree.sandbox_node("demo") is None)
        assert "demo" not in await listed(app)

        # Its siblings, as the tree's keys call them (the tree no longer shows the sandbox).
        main.workspace_files.create_folder("demo", "/workspace/src")
        main.workspace_files.rename("demo", "/workspace/keep.txt", "/workspace/k.txt")
        main.workspace_files.delete("demo", "/workspace/keep.txt", recursive=False)
        await wait_for(pilot, lambda: len(notes.errors()) == 4)
        assert sorted(notes.errors()[1:]) == [
            f"Creating /workspace/src failed: {gone}",
            f"Deleting /workspace/keep.txt failed: {gone}",
            f"Renaming /workspace/keep.txt failed: {gone}",
        ]
        await pilot.pause(0.3)
        assert "demo" not in await listed(app)
        assert tree.sandbox_node("demo") is None


async def test_the_tree_is_listed_again_after_a_run(tmp_path: Path) -> None:
    async with open_local_backend(tmp_path / "data", embedded=True) as backend:
        await backend.sandbox("demo").mkdir("/workspace/lib")
    await write_files(tmp_path, {"lib/util.pl": b"1;", "main.pl": b"1;"})
    app = make_app(tmp_path)
    main = app.main_screen
    tree = main.sandbox_tree
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        workspace = await expanded_workspace(pilot, app, "demo")
        lib = child(workspace, "/workspace/lib")
        assert lib is not None
        lib.expand()
        await wait_for(pilot, lambda: child(lib, "/workspace/lib/util.pl") is not None)
        selected = child(workspace, "/workspace/main.pl")
        assert selected is not None
        tree.move_cursor(selected)
        repl = await create_context(pilot, "PERL")
        code = 'for my $f ("made.txt", "lib/new.pl") { open my $h, ">", $f; close $h } 1'
        await run_cell(pilot, repl, code)
        await wait_for(pilot, lambda: child(workspace, "/workspace/made.txt") is not None)
        await wait_for(pilot, lambda: child(lib, "/workspace/lib/new.pl") is not None)
        assert lib.is_expanded and child(workspace, "/workspace/lib") is lib
        assert tree.cursor_node is selected


class TreeApp(App[None]):
    """The sandbox tree alone."""

    def compose(self) -> ComposeResult:
        yield SandboxTree(id="sidebar")


async def shown_workspace(
    app: TreeApp, pilot: Pilot[None]
) -> tuple[SandboxTree, TreeNode[TreeNodeData]]:
    """The tree showing sandbox `demo`, its `/workspace` node expanded."""
    tree = app.query_one(SandboxTree)
    tree.show_profile("local")
    tree.show_sandboxes([SandboxSummary("demo", "", "", None)])
    tree.show_sandbox_info(SandboxInfo("demo", "", "", {}, [], 0, 0, True, None))
    sandbox = tree.sandbox_node("demo")
    assert sandbox is not None
    workspace = next(c for c in sandbox.children if isinstance(c.data, DirectoryNode))
    workspace.expand()
    await pilot.pause()
    return tree, workspace


async def test_the_cursor_reaches_a_node_added_since_the_tree_last_drew() -> None:
    """Textual builds a tree's lines when idle; a move to a node listed in between (a file
    just made, or a test's Enter right after a listing) still lands on it."""

    app = TreeApp()
    async with app.run_test() as pilot:
        tree, workspace = await shown_workspace(app, pilot)
        files = [
            FileInfo(name, f"/workspace/{name}", name, "file", 1, "", "rw-r--r--")
            for name in ("a.txt", "b.txt")
        ]
        tree.show_directory("demo", "/workspace", files)
        listed = child(workspace, "/workspace/b.txt")
        assert listed is not None
        tree.move_cursor(listed)
        assert tree.cursor_node is listed


async def test_a_gateway_s_huge_listing_and_names_show_at_once() -> None:
    """A listing of 20,000 entries (a gateway may send what no workspace holds) took 2 s
    of CPU, most of it escaping each label a character at a time; a name of a MiB made
    each paint take a second (a helper). Labels show a name's first 256 characters."""
    app = TreeApp()
    async with app.run_test(size=(100, 30)) as pilot:
        tree, workspace = await shown_workspace(app, pilot)
        names = [f"file-{n:05}.txt" for n in range(20_000)]
        files = [FileInfo(name, f"/workspace/{name}", name, "file", 1, "", "") for name in names]
        long_name = "n" * (1 << 20)
        files.append(FileInfo(long_name, f"/workspace/{long_name}", long_name, "file", 1, "", ""))
        started = time.process_time()  # CPU: the suite's other workers load the machine
        tree.show_directory("demo", "/workspace", files)
        await pilot.pause()
        await pilot.press("end", "home")
        await pilot.pause()
        assert time.process_time() - started < 3
        shown = child(workspace, f"/workspace/{long_name}")
        assert shown is not None and len(str(shown.label)) < 300


async def test_the_tree_lists_a_folder_in_natural_order() -> None:
    """Folders first, then files; digits compare as numbers, case aside, the exact name
    breaking ties; a listing again keeps that order for the entries it adds."""

    def entry(name: str, kind: str = "file") -> FileInfo:
        return FileInfo(name, f"/workspace/{name}", name, kind, 1, "", "rw-r--r--")

    def shown_names(node: TreeNode[TreeNodeData]) -> list[str]:
        return [str(item.label).split()[0] for item in node.children]

    app = TreeApp()
    async with app.run_test() as pilot:
        tree, workspace = await shown_workspace(app, pilot)
        names = ["f10", "f2", "F1", "f02", "b", "A", "run9", "run10"]
        listing = [entry(name) for name in names] + [entry("d10", "directory")]
        listing.append(entry("d9", "directory"))
        tree.show_directory("demo", "/workspace", listing)
        expected = ["d9/", "d10/", "A", "b", "F1", "f02", "f2", "f10", "run9", "run10"]
        assert shown_names(workspace) == expected
        tree.show_directory("demo", "/workspace", [*listing, entry("f3"), entry("f100")])
        again = ["d9/", "d10/", "A", "b", "F1", "f02", "f2", "f3", "f10", "f100", "run9", "run10"]
        assert shown_names(workspace) == again


async def test_a_new_node_takes_the_cursor_at_once_and_never_later() -> None:
    """A file or folder just made is selected by the listing that adds it; a move the user
    makes after it stays (a move deferred to the next refresh took the cursor back, so
    a rename right after went to the new folder instead of the file chosen)."""

    app = TreeApp()
    async with app.run_test() as pilot:
        tree, workspace = await shown_workspace(app, pilot)
        tree.select_when_listed("demo", "/workspace/src")
        tree.show_directory(
            "demo",
            "/workspace",
            [
                FileInfo("src", "/workspace/src", "src", "directory", 0, "", "rwxr-xr-x"),
                FileInfo("new.py", "/workspace/new.py", "new.py", "file", 1, "", "rw-r--r--"),
            ],
        )
        made = child(workspace, "/workspace/src")
        assert made is not None and tree.cursor_node is made
        chosen = child(workspace, "/workspace/new.py")
        tree.move_cursor(chosen)
        await pilot.pause()
        await pilot.pause()
        assert tree.cursor_node is chosen


async def test_a_new_file_in_a_collapsed_sandbox_is_shown_listed(tmp_path: Path) -> None:
    """alt+n on a collapsed sandbox (its `/workspace` shown once before): the new file's
    folders were expanded but never listed, `/workspace` stayed "loading…" (found by
    review). Now its sandbox is expanded too and the new file is shown, selected."""
    await write_files(tmp_path, {"keep.txt": b"keep"})
    app = make_app(tmp_path)
    tree = app.main_screen.sandbox_tree
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        workspace = await expanded_workspace(pilot, app, "demo")
        demo = tree.sandbox_node("demo")
        assert demo is not None
        demo.collapse()
        tree.focus()
        tree.move_cursor(demo)
        await pilot.pause()
        await name_it(pilot, "alt+n", "new.txt")
        new = FileNode("demo", "/workspace/new.txt")
        await wait_for(pilot, lambda: new in [child.data for child in workspace.children])
        assert demo.is_expanded and workspace.is_expanded
        await wait_for(pilot, lambda: tree.cursor_node is not None and tree.cursor_node.data == new)


async def test_a_folder_renamed_while_expanded_stays_expanded(tmp_path: Path) -> None:
    """Renaming an expanded folder showed it collapsed under its new name (QA); it stays
    expanded, and so do the folders expanded in it."""
    async with open_local_backend(tmp_path / "data", embedded=True) as backend:
        sandbox = backend.sandbox("demo")
        await sandbox.mkdir("/workspace/src/inner", recursive=True)
        for path in ("top.txt", "src/a.py", "src/inner/deep.py"):
            await sandbox.write_file(f"/workspace/{path}", path)
    app = make_app(tmp_path)
    tree = app.main_screen.sandbox_tree
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        workspace = await expanded_workspace(pilot, app, "demo")

        await wait_for(pilot, lambda: child(workspace, "/workspace/src") is not None)
        src = child(workspace, "/workspace/src")
        assert src is not None
        src.expand()
        await wait_for(pilot, lambda: child(src, "/workspace/src/inner") is not None)
        inner = child(src, "/workspace/src/inner")
        assert inner is not None
        inner.expand()
        await wait_for(pilot, lambda: child(inner, "/workspace/src/inner/deep.py") is not None)
        tree.focus()
        tree.move_cursor(src)
        await pilot.pause()
        await name_it(pilot, "alt+e", "lib", clear=True)

        def expanded_lib() -> bool:
            lib = child(workspace, "/workspace/lib")
            moved = None if lib is None else child(lib, "/workspace/lib/inner")
            deep = None if moved is None else child(moved, "/workspace/lib/inner/deep.py")
            return lib is not None and lib.is_expanded and deep is not None and moved.is_expanded

        await wait_for(pilot, expanded_lib)
        assert child(workspace, "/workspace/src") is None
