"""F5 (refresh) keeps what the tree shows expanded and reads the open files again; a
sandbox another client destroyed stays destroyed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.widgets.tree import TreeNode

from tests.tui.test_file_editing import header, listed, open_file, type_at_the_end, write_files
from tests.tui.test_flows import Notifications, make_app
from tour import (
    WorkbenchPilot,
    create_context,
    expanded_workspace,
    run_cell,
    until_connected,
    wait_for,
)
from workbench.api import Backend, MockTransport, SandboxClient, SandboxInfo, SandboxSummary
from workbench.backends.local import open_local_backend
from workbench.config import ConfigError
from workbench.protocol.http import Request, Response, parse_json
from workbench.tui.app import WorkbenchApp
from workbench.tui.messages import SandboxesLoaded
from workbench.tui.tree_nodes import DirectoryNode, FileNode, TreeNodeData
from workbench.tui.widgets.workbench_tabs import repl_tab_id

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


async def test_a_refresh_leaves_a_sandbox_another_client_destroyed_destroyed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F5 listed the expanded folders and read the open files of each sandbox while it
    listed the sandboxes: those requests made a sandbox another client destroyed again,
    empty, which the tree then showed again. Now the refresh lists the sandboxes once and
    asks only about the listed ones."""
    await write_files(tmp_path, {"notes.txt": b"mine"})
    app = make_app(tmp_path)
    notes = Notifications(app, monkeypatch)
    main = app.main_screen
    async with app.run_test(size=(120, 40)) as pilot:
        view = await open_file(pilot, app, "notes.txt")
        repl = await create_context(pilot, "PERL")
        await run_cell(pilot, repl, "1")
        backend = app.backend
        assert backend is not None
        await backend.sandbox("kept").write_file("/workspace/k.txt", "k")
        await pilot.press("f5")
        await wait_for(pilot, lambda: main.sandbox_tree.sandbox_node("kept") is not None)
        await expanded_workspace(pilot, app, "kept")
        await type_at_the_end(pilot, view, "!")
        await backend.sandbox("demo").destroy()  # another client
        listings = 0
        list_sandboxes = backend.list_sandboxes

        async def counted_listing() -> list[SandboxSummary]:
            nonlocal listings
            listings += 1
            return await list_sandboxes()

        monkeypatch.setattr(backend, "list_sandboxes", counted_listing)
        await backend.sandbox("kept").write_file("/workspace/new.txt", "new")
        await pilot.press("f5")

        kept = main.sandbox_tree.sandbox_node("kept")
        assert kept is not None

        def kept_listed_again() -> bool:
            return any(
                FileNode("kept", "/workspace/new.txt") in [leaf.data for leaf in child.children]
                for child in kept.children
            )

        await wait_for(pilot, lambda: main.sandbox_tree.sandbox_node("demo") is None)
        await wait_for(pilot, lambda: "sandbox demo gone" in header(view))
        await wait_for(pilot, kept_listed_again)
        assert view.editor.text == "mine!" and view.is_dirty
        await wait_for(pilot, lambda: repl.gone)
        tab = main.tabs.get_tab(repl_tab_id(repl.context.id))
        assert str(tab.label).endswith(" (gone)")
        for _ in range(10):  # every answer of the refresh is in
            await pilot.pause(0.05)
        assert listings == 1
        monkeypatch.setattr(backend, "list_sandboxes", list_sandboxes)
        assert "demo" not in await listed(app)
        assert main.sandbox_tree.sandbox_node("demo") is None
        assert not notes.errors()


async def test_reloading_a_file_of_a_sandbox_found_gone_makes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """alt+l on a file whose sandbox a refresh found gone: the read would make the sandbox
    again, empty (and then fail); it is declined, and the view keeps its text."""
    await write_files(tmp_path, {"notes.txt": b"mine"})
    app = make_app(tmp_path)
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        view = await open_file(pilot, app, "notes.txt")
        assert app.backend is not None
        await app.backend.sandbox("demo").destroy()  # another client
        await pilot.press("f5")
        await wait_for(pilot, lambda: "sandbox demo gone" in header(view))
        view.focus_content()
        await pilot.press("alt+l")
        await wait_for(
            pilot, lambda: any("nothing to reload" in message for message, _, _ in notes.calls)
        )
        assert "demo" not in await listed(app)
        assert view.editor.text == "mine" and "sandbox demo gone" in header(view)


async def test_a_listing_of_the_profile_before_a_switch_is_not_shown(tmp_path: Path) -> None:
    """A listing that arrives after the profile switched (its worker was slower) is the
    old backend's: the tree does not show its sandboxes, nor reopens tabs from it."""
    app = make_app(tmp_path)
    tree = app.main_screen.sandbox_tree
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        assert app.backend is not None
        ghost = SandboxSummary("ghost", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", None)
        stale = Backend(MockTransport(lambda request: Response(500, b"{}")), name="stale")
        later = app.main_screen.connection.listings + 1  # after every listing asked for
        app.main_screen.post_message(SandboxesLoaded([ghost], stale, later))
        app.main_screen.post_message(SandboxesLoaded([ghost], app.backend, later))
        await wait_for(pilot, lambda: tree.sandbox_node("ghost") is not None)
        app.main_screen.post_message(SandboxesLoaded([], stale, later + 1))
        await pilot.pause(0.1)
        assert tree.sandbox_node("ghost") is not None  # the stale listing changed nothing


async def test_a_refresh_reads_the_selected_expanded_sandbox_s_info_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The info of every expanded sandbox is read again; the selected one's was read a
    second time when it was expanded too."""
    await write_files(tmp_path, {"a.txt": b"a"})
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await expanded_workspace(pilot, app, "demo")
        await wait_for(pilot, lambda: "demo" in app.main_screen.sandbox_infos)  # expanding read it
        tree = app.main_screen.sandbox_tree
        tree.move_cursor(tree.sandbox_node("demo"))
        await wait_for(pilot, lambda: app.main_screen.selected_sandbox_id == "demo")
        await pilot.pause(0.2)  # the info its selection read is in
        reads: list[str] = []
        get_info = SandboxClient.get_info

        async def counted(sandbox: SandboxClient) -> SandboxInfo:
            reads.append(sandbox.id)
            return await get_info(sandbox)

        monkeypatch.setattr(SandboxClient, "get_info", counted)
        await pilot.press("f5")
        await wait_for(pilot, lambda: "demo" in reads)
        for _ in range(10):  # every answer of the refresh is in
            await pilot.pause(0.05)
        assert reads == ["demo"]


async def test_the_info_of_a_sandbox_another_client_destroyed_is_no_longer_shown(
    tmp_path: Path,
) -> None:
    """Its last info stayed in the panel, as if the sandbox were there, after the listing
    that dropped it from the tree (as it goes when this workbench destroys one)."""
    await write_files(tmp_path, {"notes.txt": b"mine"})
    app = make_app(tmp_path)
    main = app.main_screen
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await expanded_workspace(pilot, app, "demo")
        await wait_for(pilot, lambda: main.info_panel.info is not None)
        info = main.info_panel.info
        assert info is not None and info.id == "demo"
        backend = app.backend
        assert backend is not None
        await backend.sandbox("demo").destroy()  # another client
        await pilot.press("f5")
        await wait_for(pilot, lambda: main.sandbox_tree.sandbox_node("demo") is None)
        await wait_for(pilot, lambda: main.info_panel.info is None)
        assert main.highlighted_sandbox_id is None


async def test_a_sandbox_gone_from_under_the_cursor_leaves_its_keys_to_the_next(
    tmp_path: Path,
) -> None:
    """The cursor lands on another sandbox when a listing drops the one it was on; its
    keys (F3, F4…) act on that one, whose info is shown (they were off until the cursor
    moved; found by review)."""
    await write_files(tmp_path, {"notes.txt": b"mine"})
    app = make_app(tmp_path)
    main = app.main_screen
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        backend = app.backend
        assert backend is not None
        await backend.sandbox("other").write_file("/workspace/o.txt", "o")
        await pilot.press("f5")
        await wait_for(pilot, lambda: main.sandbox_tree.sandbox_node("other") is not None)
        await expanded_workspace(pilot, app, "other")
        await expanded_workspace(pilot, app, "demo")
        demo = main.sandbox_tree.sandbox_node("demo")
        assert demo is not None
        main.sandbox_tree.focus()
        main.sandbox_tree.move_cursor(demo)
        await wait_for(pilot, lambda: main.highlighted_sandbox_id == "demo")
        await backend.sandbox("demo").destroy()  # another client
        await pilot.press("f5")
        await wait_for(pilot, lambda: main.sandbox_tree.sandbox_node("demo") is None)
        await wait_for(pilot, lambda: main.highlighted_sandbox_id == "other")
        info = main.info_panel.info
        assert info is not None and info.id == "other"
        assert main.check_action("edit_env_vars", ()) is True


def child_node(parent: TreeNode[TreeNodeData], data: TreeNodeData) -> TreeNode[TreeNodeData] | None:
    return next((node for node in parent.children if node.data == data), None)


async def expanded_sub(pilot: WorkbenchPilot, app: WorkbenchApp, inner: str) -> None:
    """Expand demo's `/workspace` and `/workspace/sub`, until `sub/<inner>` is listed."""
    workspace = await expanded_workspace(pilot, app, "demo")
    sub = child_node(workspace, DirectoryNode("demo", "/workspace/sub"))
    assert sub is not None
    sub.expand()
    listed = DirectoryNode("demo", f"/workspace/sub/{inner}")
    await wait_for(pilot, lambda: child_node(sub, listed) is not None)


async def test_the_tree_opens_as_it_was_left(tmp_path: Path) -> None:
    """The tree came back collapsed at every start: each sandbox, `/workspace` and folder
    had to be opened again. Those the last session showed expanded are expanded again
    (and listed); a sandbox gone meanwhile is left out."""
    async with open_local_backend(tmp_path / "data", embedded=True) as backend:
        await backend.sandbox("demo").mkdir("/workspace/sub/deep", recursive=True)
        await backend.sandbox("demo").write_file("/workspace/sub/deep/file.txt", "d")
        await backend.sandbox("demo").write_file("/workspace/top.txt", "t")
    app = make_app(tmp_path)
    main = app.main_screen
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await expanded_sub(pilot, app, "deep")
        backend = app.backend
        assert backend is not None
        await backend.sandbox("gone").write_file("/workspace/g.txt", "g")
        await pilot.press("f5")
        await wait_for(pilot, lambda: main.sandbox_tree.sandbox_node("gone") is not None)
        await expanded_workspace(pilot, app, "gone")
        await pilot.press("ctrl+q")
    assert main.expanded_tree.expanded("local") == {
        "demo": ["/workspace", "/workspace/sub"],
        "gone": ["/workspace"],
    }
    async with open_local_backend(tmp_path / "data", embedded=True) as other:
        await other.sandbox("gone").destroy()

    again = make_app(tmp_path)
    tree = again.main_screen.sandbox_tree
    async with again.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)

        def deep_shown() -> bool:
            demo = tree.sandbox_node("demo")
            workspace = demo and child_node(demo, DirectoryNode("demo", "/workspace"))
            sub = workspace and child_node(workspace, DirectoryNode("demo", "/workspace/sub"))
            deep = sub and child_node(sub, DirectoryNode("demo", "/workspace/sub/deep"))
            return bool(demo and workspace and sub and deep and sub.is_expanded)

        await wait_for(pilot, deep_shown)
        demo = tree.sandbox_node("demo")
        assert demo is not None and demo.is_expanded
        assert tree.expanded_directories("demo") == ["/workspace", "/workspace/sub"]
        assert tree.sandbox_node("gone") is None
        assert "gone" not in await listed(again)


async def test_a_listing_answered_after_a_later_one_is_not_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two listings of one profile answered out of order: the older one undid what the
    newer showed (a sandbox made meanwhile dropped from the tree, its tabs and files said
    gone). It is not shown; its refresh still reads the sandboxes shown."""
    await write_files(tmp_path, {"a.txt": b"a"})
    app = make_app(tmp_path)
    tree = app.main_screen.sandbox_tree
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await wait_for(pilot, lambda: tree.sandbox_node("demo") is not None)
        backend = app.backend
        assert backend is not None
        list_sandboxes = backend.list_sandboxes
        release = asyncio.Event()
        calls = 0

        async def first_held() -> list[SandboxSummary]:
            nonlocal calls
            calls += 1
            listed = await list_sandboxes()
            if calls == 1:  # what was there then, answered after the next listing
                await release.wait()
            return listed

        monkeypatch.setattr(backend, "list_sandboxes", first_held)
        await pilot.press("f5")
        await wait_for(pilot, lambda: calls == 1)
        await backend.sandbox("fresh").write_file("/workspace/f.txt", "f")  # another client
        await pilot.press("f5")
        await wait_for(pilot, lambda: tree.sandbox_node("fresh") is not None)
        release.set()
        await wait_for(pilot, lambda: not [w for w in app.workers if not w.is_finished])
        await pilot.pause()
        assert tree.sandbox_node("fresh") is not None


async def test_a_folder_gone_since_the_last_session_is_not_expanded_when_made_again(
    tmp_path: Path,
) -> None:
    """Kept expanded, then deleted before the next start: a folder of that path another
    client makes later was expanded, though the user never opened it (found by review)."""
    async with open_local_backend(tmp_path / "data", embedded=True) as backend:
        await backend.sandbox("demo").mkdir("/workspace/sub/deeper", recursive=True)
        await backend.sandbox("demo").write_file("/workspace/top.txt", "t")
    app = make_app(tmp_path)
    main = app.main_screen
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await expanded_sub(pilot, app, "deeper")
        await pilot.press("ctrl+q")
    assert main.expanded_tree.expanded("local") == {"demo": ["/workspace", "/workspace/sub"]}
    async with open_local_backend(tmp_path / "data", embedded=True) as other:
        await other.sandbox("demo").delete_file("/workspace/sub", recursive=True)

    again = make_app(tmp_path)
    tree = again.main_screen.sandbox_tree
    async with again.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await wait_for(pilot, lambda: tree.expanded_directories("demo") == ["/workspace"])
        await wait_for(pilot, lambda: not [w for w in again.workers if not w.is_finished])
        assert again.backend is not None
        await again.backend.sandbox("demo").mkdir("/workspace/sub")  # another client
        await pilot.press("f5")
        demo = tree.sandbox_node("demo")
        assert demo is not None
        workspace = child_node(demo, DirectoryNode("demo", "/workspace"))
        assert workspace is not None
        sub_data = DirectoryNode("demo", "/workspace/sub")
        await wait_for(pilot, lambda: child_node(workspace, sub_data) is not None)
        await wait_for(pilot, lambda: not [w for w in again.workers if not w.is_finished])
        assert tree.expanded_directories("demo") == ["/workspace"]


async def test_a_profile_that_fails_to_open_shows_nothing_of_the_one_before(
    tmp_path: Path,
) -> None:
    """A switch to a profile whose backend cannot be made (a broken config) kept the
    previous profile's backend: F5 showed its sandboxes under the new profile's name, and
    quitting kept that tree for it (found by review)."""
    await write_files(tmp_path, {"a.txt": b"a"})
    data = tmp_path / "data"

    def backends(name: str) -> Backend:
        if name == "broken":
            raise ConfigError("profile broken has no token")
        return open_local_backend(data, embedded=True)

    app = WorkbenchApp(data_dir=data, backend_factory=backends)
    main = app.main_screen
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        await wait_for(pilot, lambda: main.sandbox_tree.sandbox_node("demo") is not None)
        main.switch_profile("broken")
        await wait_for(pilot, lambda: main.status.state == "unreachable")
        await pilot.press("f5")
        await pilot.pause(0.2)
        assert app.backend is None
        assert main.sandbox_tree.sandbox_node("demo") is None
        await pilot.press("ctrl+q")
    assert main.expanded_tree.expanded("broken") == {}


async def test_a_profile_switched_to_has_none_of_the_previous_backend_s_features(
    tmp_path: Path,
) -> None:
    """The TUI kept the features the previous profile's health listed until the new
    one's health answered: switched from the local backend to a gateway that cannot
    refuse requests for a gone sandbox (here a front that passes on no extension header)
    and whose health fails, expanding a sandbox was refused as "cannot refuse a request"
    instead of listing the sandboxes first (found by review)."""
    await write_files(tmp_path, {"a.txt": b"a"})
    data = tmp_path / "data"
    fronted = open_local_backend(tmp_path / "older", embedded=True)
    await fronted.sandbox("demo").write_file("/workspace/b.txt", "b")

    async def older_front(request: Request) -> Response:
        if request.path == "/v1/health":
            return Response.json(503, {"error": "runtimes are waking up"})
        body = parse_json(request.body) if request.body else None
        return await fronted.transport.request(request.method, request.path, body)

    def backends(name: str) -> Backend:
        if name == "older":
            return Backend(MockTransport(older_front), name="older")
        return open_local_backend(data, embedded=True)

    app = WorkbenchApp(data_dir=data, backend_factory=backends)
    main = app.main_screen
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await until_connected(pilot)
            await wait_for(pilot, lambda: main.connection.refuses_gone_sandboxes)
            main.switch_profile("older")
            await wait_for(pilot, lambda: main.status.state == "unreachable")
            await wait_for(pilot, lambda: main.sandbox_tree.sandbox_node("demo") is not None)
            assert not main.connection.refuses_gone_sandboxes
            workspace = await expanded_workspace(pilot, app, "demo")
            assert [child.data.path for child in workspace.children] == ["/workspace/b.txt"]
    finally:
        await fronted.aclose()
