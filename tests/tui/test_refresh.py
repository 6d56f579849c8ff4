"""F5 (refresh) keeps what the tree shows expanded and reads the open files again."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tui.test_file_editing import header, open_file, type_at_the_end, write_files
from tests.tui.test_flows import make_app
from tour import expanded_workspace, until_connected, wait_for
from workbench.tui.tree_nodes import DirectoryNode, FileNode

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]


async def test_refresh_keeps_the_expanded_workspace(tmp_path: Path) -> None:
    await write_files(tmp_path, {"a.txt": b"a"})
    app = make_app(tmp_path)
    tree = app.main_screen.sandbox_tree
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await expanded_workspace(pilot, app, "demo")
        assert app.backend is not None
        await app.backend.sandbox("demo").write_file("/workspace/b.txt", "b")
        tree.focus()
        await pilot.press("f5")

        def listed_again() -> bool:
            sandbox = tree.sandbox_node("demo")
            if sandbox is None or not sandbox.is_expanded:
                return False
            node = next((c for c in sandbox.children if isinstance(c.data, DirectoryNode)), None)
            return (
                node is not None
                and node.is_expanded
                and FileNode("demo", "/workspace/b.txt") in [c.data for c in node.children]
            )

        await wait_for(pilot, listed_again, 10)
        for _ in range(5):  # and it stays so once every answer of the refresh is in
            await pilot.pause(0.05)
        assert listed_again()
        assert tree.expanded_directories("demo") == ["/workspace"]


async def test_refresh_reloads_an_unmodified_file_view(tmp_path: Path) -> None:
    await write_files(tmp_path, {"c.txt": b"mine"})
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        view = await open_file(pilot, app, "c.txt")
        assert app.backend is not None
        await app.backend.sandbox("demo").write_file("/workspace/c.txt", "from a shell")
        await pilot.press("f5")
        await wait_for(pilot, lambda: view.editor.text == "from a shell", 10)
        assert not view.is_dirty and not view.changed_underneath
        assert "changed in the sandbox" not in header(view)


async def test_refresh_flags_a_modified_file_view_and_keeps_the_edits(tmp_path: Path) -> None:
    await write_files(tmp_path, {"c.txt": b"mine"})
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        view = await open_file(pilot, app, "c.txt")
        await type_at_the_end(pilot, view, "+edit")
        assert app.backend is not None
        await app.backend.sandbox("demo").write_file("/workspace/c.txt", "from a shell")
        await pilot.press("f5")
        await wait_for(pilot, lambda: view.changed_underneath, 10)
        assert view.editor.text == "mine+edit" and view.is_dirty
        shown = header(view)
        assert "● modified" in shown
        assert "changed in the sandbox since you opened it" in shown
