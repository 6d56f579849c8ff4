"""Every action on a sandbox another client destroyed after the tree last listed it (a
stale tree): any request naming the sandbox makes it again, empty (spec 2.4), so each
action the user starts asks the listing first, once; the sandbox gone, nothing naming it
is sent, the tree drops it, its tabs say it is gone, and the user is told. A REPL tab
already known gone declines without asking anything."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, Select, Static, TextArea
from textual.widgets.tree import TreeNode

from tests.tui import held_until_set
from tests.tui.test_file_editing import listed, open_file
from tests.tui.test_flows import Notifications, app_over, local_gateway, make_app
from tests.tui.test_inspector import listed as inspector_rows
from tests.tui.test_tree_operations import child
from tour import (
    WorkbenchPilot,
    create_context,
    expanded_workspace,
    run_cell,
    until_connected,
    wait_for,
)
from workbench.api import (
    Backend,
    Handler,
    MockTransport,
    Request,
    Response,
)
from workbench.backends.local import LocalGateway, open_local_backend
from workbench.protocol.http import must_exist
from workbench.tui.app import WorkbenchApp
from workbench.tui.screens.checkpoint_picker_screen import CheckpointPickerScreen
from workbench.tui.screens.confirm_screen import ConfirmScreen
from workbench.tui.screens.create_context_screen import CreateContextScreen
from workbench.tui.screens.env_vars_screen import EnvVarsScreen
from workbench.tui.screens.name_screen import NameScreen
from workbench.tui.screens.watch_screen import WatchRequest
from workbench.tui.tree_nodes import ContextNode, TreeNodeData
from workbench.tui.widgets.env_vars_input import EnvVarsInput
from workbench.tui.widgets.repl_pane import GONE_REFUSAL, ReplPane
from workbench.tui.widgets.workbench_tabs import INFO_TAB

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]

GONE = (
    "sandbox demo is gone (another client destroyed it, or it expired), so nothing was "
    "done: that would have made it again, empty"
)


class SentRequests:
    """The requests the backend's client sends from now on, as (method, path): a spy on
    its transport (each still goes to the real backend)."""

    def __init__(self, backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[tuple[str, str]] = []
        self.must_exist: list[bool] = []
        """Whether each was sent only if its sandbox exists (`MUST_EXIST_HEADER`)."""
        request = backend.transport.request

        async def recorded(method: str, path: str, body: Any = None, **options: Any) -> Response:
            self.sent.append((method, path))
            self.must_exist.append(must_exist(options.get("headers") or {}))
            return await request(method, path, body, **options)

        monkeypatch.setattr(backend.transport, "request", recorded)

    def naming(self, sandbox_id: str, *, unless_it_exists: bool = False) -> list[tuple[str, str]]:
        """The requests naming the sandbox; `unless_it_exists`: those that would make it
        (sent without `MUST_EXIST_HEADER`)."""
        prefix = f"/v1/sandboxes/{sandbox_id}"
        return [
            (method, path)
            for (method, path), only_if_it_exists in zip(self.sent, self.must_exist, strict=True)
            if (path == prefix or path.startswith(f"{prefix}/"))
            and not (unless_it_exists and only_if_it_exists)
        ]

    @property
    def listings(self) -> int:
        return self.sent.count(("GET", "/v1/sandboxes"))


async def make_demo(tmp_path: Path, *, other: bool = False) -> None:
    """The sandbox demo: `/workspace/notes.txt`, `/workspace/sub/deep.txt` and a Perl
    context (with `other`, a sandbox `other` too)."""
    async with open_local_backend(tmp_path / "data", embedded=True) as backend:
        sandbox = backend.sandbox("demo")
        await sandbox.write_file("/workspace/notes.txt", "mine")
        await sandbox.mkdir("/workspace/sub")
        await sandbox.write_file("/workspace/sub/deep.txt", "deep")
        await sandbox.interpreter.create_code_context("PERL")
        if other:
            await backend.sandbox("other").write_file("/workspace/o.txt", "o")


class StaleWorkbench:
    """A workbench on demo whose tree goes stale at `destroy`: another client destroys
    demo; the requests the workbench sends from then on are recorded."""

    def __init__(
        self, pilot: WorkbenchPilot, app: WorkbenchApp, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        self.pilot = pilot
        self.app = app
        self.main = app.main_screen
        self.tree = app.main_screen.sandbox_tree
        self.notes = Notifications(app, monkeypatch)
        self.monkeypatch = monkeypatch
        self.sent: SentRequests | None = None

    @property
    def backend(self) -> Backend:
        backend = self.app.backend
        assert backend is not None
        return backend

    async def destroy(self) -> None:
        """Once the workbench's calls are answered (one still on its way would make demo
        again), another client destroys demo."""
        await self.settled()
        await self.backend.sandbox("demo").destroy()  # another client
        self.sent = SentRequests(self.backend, self.monkeypatch)

    async def settled(self) -> None:
        """Until no call of the workbench (nor an inspection) is on its way."""

        def answered() -> bool:
            return not any(
                not worker.is_finished
                and (worker.group == "backend-call" or worker.group.startswith("inspect-"))
                for worker in self.app.workers
            )

        await wait_for(self.pilot, answered)

    async def quiet(self) -> None:
        """Until no worker of the workbench runs, twice over a refresh of the screen: the
        requests an action makes, and those its answers' handlers make, are all in."""
        for _ in range(2):
            await wait_for(
                self.pilot, lambda: all(worker.is_finished for worker in self.app.workers)
            )
            await self.pilot.pause()

    def sandbox_node(self) -> TreeNode[TreeNodeData]:
        node = self.tree.sandbox_node("demo")
        assert node is not None
        return node

    async def key_on(self, node: TreeNode[TreeNodeData], key: str) -> None:
        """With the cursor on `node`, another client destroys demo; then `key`."""
        await self.cursor_to(node)
        await self.destroy()
        await self.pilot.press(key)

    async def cursor_to(self, node: TreeNode[TreeNodeData]) -> None:
        self.tree.focus()
        self.tree.move_cursor(node)
        await self.pilot.pause()

    async def repl(self, code: str = "our $n = 41") -> ReplPane:
        """A REPL of demo's new Perl context that ran `code`."""
        await self.cursor_to(self.sandbox_node())
        repl = await create_context(self.pilot, "PERL")
        await run_cell(self.pilot, repl, code)
        return repl

    def error_said(self, title: str) -> Callable[[], bool]:
        """The one error notified is `title: GONE`."""
        return lambda: self.notes.errors() == [f"{title}: {GONE}"]


Action = Callable[[StaleWorkbench], Awaitable[Callable[[], bool]]]
"""Prepares while demo exists, calls `destroy`, acts; what says the user was told."""


async def enter_on_the_sandbox(stale: StaleWorkbench) -> Callable[[], bool]:
    """Enter on its collapsed node: it is selected (its info shown) and expanded."""
    await stale.key_on(stale.sandbox_node(), "enter")
    return stale.error_said("Loading demo failed")


async def space_on_the_sandbox(stale: StaleWorkbench) -> Callable[[], bool]:
    """Space expands its collapsed node (its contexts and `/workspace`)."""
    await stale.key_on(stale.sandbox_node(), "space")
    return stale.error_said("Loading demo failed")


async def enter_on_the_expanded_sandbox(stale: StaleWorkbench) -> Callable[[], bool]:
    """Enter on its expanded node collapses it and shows its info, read again."""
    await expanded_workspace(stale.pilot, stale.app, "demo")
    await stale.key_on(stale.sandbox_node(), "enter")
    return stale.error_said("Loading demo failed")


async def expand_a_folder(stale: StaleWorkbench) -> Callable[[], bool]:
    workspace = await expanded_workspace(stale.pilot, stale.app, "demo")
    folder = child(workspace, "/workspace/sub")
    assert folder is not None and not folder.is_expanded
    await stale.key_on(folder, "space")
    return stale.error_said("Listing /workspace/sub failed")


async def open_a_file(stale: StaleWorkbench) -> Callable[[], bool]:
    workspace = await expanded_workspace(stale.pilot, stale.app, "demo")
    file = child(workspace, "/workspace/notes.txt")
    assert file is not None
    await stale.key_on(file, "enter")
    return stale.error_said("Opening /workspace/notes.txt failed")


async def open_a_context(stale: StaleWorkbench) -> Callable[[], bool]:
    await expanded_workspace(stale.pilot, stale.app, "demo")
    contexts = [
        leaf
        for node in stale.sandbox_node().children
        for leaf in node.children
        if isinstance(leaf.data, ContextNode)
    ]
    assert len(contexts) == 1
    await stale.key_on(contexts[0], "enter")
    return stale.error_said("Loading the context's history failed")


async def f3_new_context(stale: StaleWorkbench) -> Callable[[], bool]:
    """The dialog opens (it asks nothing); its Create says the sandbox is gone."""
    await stale.key_on(stale.sandbox_node(), "f3")
    await wait_for(stale.pilot, lambda: isinstance(stale.app.screen, CreateContextScreen))
    dialog = stale.app.screen
    dialog.query_one("#binding", Select).value = "PERL"
    dialog.query_one("#create", Button).press()
    problem = dialog.query_one("#create-problem", Static)
    return lambda: GONE in str(problem.render()) and not stale.notes.errors()


async def f4_env_vars(stale: StaleWorkbench) -> Callable[[], bool]:
    """Its info loaded: the dialog opens with its env vars; its Save says the sandbox is
    gone, under the field, which keeps what was typed (it closed, and the text was lost)."""
    await expanded_workspace(stale.pilot, stale.app, "demo")
    await stale.key_on(stale.sandbox_node(), "f4")
    await wait_for(stale.pilot, lambda: isinstance(stale.app.screen, EnvVarsScreen))
    dialog = stale.app.screen
    await stale.pilot.press(*"KEY=value")
    dialog.query_one("#save", Button).press()
    problem = dialog.query_one("#save-problem", Static)
    typed = dialog.query_one(EnvVarsInput).query_one(TextArea)
    return lambda: (
        GONE in str(problem.render())
        and stale.app.screen is dialog
        and "KEY=value" in typed.text
        and not stale.notes.errors()
    )


async def f4_env_vars_before_the_info(stale: StaleWorkbench) -> Callable[[], bool]:
    """Its info not loaded yet: F4 reads it first."""
    await stale.key_on(stale.sandbox_node(), "f4")
    return stale.error_said("Loading demo failed")


async def f6_watch(stale: StaleWorkbench) -> Callable[[], bool]:
    folder = stale.main.data_dir.parent / "watched"
    folder.mkdir()
    (folder / "main.pl").write_text("print 1;\n")
    await stale.cursor_to(stale.sandbox_node())
    await stale.destroy()
    stale.main.start_watch("demo", None, WatchRequest(folder, "/workspace", None))
    return lambda: stale.notes.errors() == [f"Watching stopped: {GONE}"]


async def alt_l_reload(stale: StaleWorkbench) -> Callable[[], bool]:
    await open_file(stale.pilot, stale.app, "notes.txt")
    await stale.destroy()
    await stale.pilot.press("alt+l")
    return stale.error_said("Opening /workspace/notes.txt failed")


async def info_of_a_run_shown_on_a_cursor_move(stale: StaleWorkbench) -> Callable[[], bool]:
    """A run left demo's info stale (another tab was shown); the cursor reaching demo
    reads it again."""
    await stale.repl()
    other = stale.tree.sandbox_node("other")
    assert other is not None
    await stale.cursor_to(other)
    await stale.destroy()
    await stale.cursor_to(stale.sandbox_node())
    return stale.error_said("Loading demo failed")


async def info_of_a_run_shown_on_the_info_tab(stale: StaleWorkbench) -> Callable[[], bool]:
    """A run left demo's info stale; showing the info tab reads it again."""
    await stale.repl()
    await stale.destroy()
    stale.main.show_tab(INFO_TAB)
    return stale.error_said("Loading demo failed")


async def alt_k_fork(stale: StaleWorkbench) -> Callable[[], bool]:
    await stale.repl()
    await stale.destroy()
    await stale.pilot.press("alt+k")
    return stale.error_said("Forking the context failed")


async def confirmed(stale: StaleWorkbench, key: str) -> None:
    await stale.pilot.press(key)
    await wait_for(stale.pilot, lambda: isinstance(stale.app.screen, ConfirmScreen))
    await stale.pilot.click("#confirm")


async def alt_d_delete_context(stale: StaleWorkbench) -> Callable[[], bool]:
    await stale.repl()
    await stale.destroy()
    await confirmed(stale, "alt+d")
    return stale.error_said("Changing the context failed")


async def alt_r_reset_context(stale: StaleWorkbench) -> Callable[[], bool]:
    await stale.repl()
    await stale.destroy()
    await confirmed(stale, "alt+r")
    return stale.error_said("Changing the context failed")


async def alt_p_save_checkpoint(stale: StaleWorkbench) -> Callable[[], bool]:
    await stale.repl()
    await stale.destroy()
    await stale.pilot.press("alt+p")
    await wait_for(stale.pilot, lambda: isinstance(stale.app.screen, NameScreen))
    await stale.pilot.press(*"before", "enter")
    return stale.error_said("Saving the checkpoint failed")


async def alt_z_checkpoints(stale: StaleWorkbench) -> Callable[[], bool]:
    await stale.repl()
    await stale.destroy()
    await stale.pilot.press("alt+z")
    return stale.error_said("Listing the checkpoints failed")


async def picked_checkpoint(stale: StaleWorkbench) -> None:
    """A checkpoint saved, the picker open on it, then demo destroyed."""
    repl = await stale.repl()
    await stale.backend.sandbox("demo").interpreter.save_checkpoint(repl.context.id, "one")
    await stale.pilot.press("alt+z")
    await wait_for(stale.pilot, lambda: isinstance(stale.app.screen, CheckpointPickerScreen))
    await stale.destroy()


async def restore_picked_checkpoint(stale: StaleWorkbench) -> Callable[[], bool]:
    await picked_checkpoint(stale)
    await stale.pilot.press("enter")
    return stale.error_said("Restoring the checkpoint failed")


async def delete_picked_checkpoint(stale: StaleWorkbench) -> Callable[[], bool]:
    await picked_checkpoint(stale)
    await confirmed(stale, "delete")
    return stale.error_said("Deleting the checkpoint one failed")


async def alt_g_inspector(stale: StaleWorkbench) -> Callable[[], bool]:
    repl = await stale.repl()
    await stale.destroy()
    await stale.pilot.press("alt+g")
    state = repl.inspector.query_one("#inspector-state", Static)
    return lambda: f"Inspecting failed: {GONE}" in str(state.render())


async def enter_on_an_inspected_name(stale: StaleWorkbench) -> Callable[[], bool]:
    repl = await stale.repl()
    await stale.pilot.press("alt+g")
    await wait_for(stale.pilot, lambda: len(inspector_rows(repl.inspector)) == 1)
    repl.inspector.table.focus()
    await stale.destroy()
    await stale.pilot.press("enter")
    return stale.error_said("Inspecting failed")


STALE_ACTIONS: list[Action] = [
    enter_on_the_sandbox,
    space_on_the_sandbox,
    enter_on_the_expanded_sandbox,
    expand_a_folder,
    open_a_file,
    open_a_context,
    f3_new_context,
    f4_env_vars,
    f4_env_vars_before_the_info,
    f6_watch,
    alt_l_reload,
    info_of_a_run_shown_on_a_cursor_move,
    info_of_a_run_shown_on_the_info_tab,
    alt_k_fork,
    alt_d_delete_context,
    alt_r_reset_context,
    alt_p_save_checkpoint,
    alt_z_checkpoints,
    restore_picked_checkpoint,
    delete_picked_checkpoint,
    alt_g_inspector,
    enter_on_an_inspected_name,
]


@pytest.mark.parametrize("action", STALE_ACTIONS, ids=lambda action: action.__name__)
async def test_an_action_on_a_sandbox_another_client_destroyed_makes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, action: Action, refused_by_the_backend: bool
) -> None:
    """Each made the sandbox again, empty (or, for its files, failed with a "not found"
    that did not say why): now it sends nothing naming demo that would make it (where the
    backend offers it, its request is refused instead, and the listing follows; else it
    lists the sandboxes first), the tree drops demo and the user is told it is gone."""
    await make_demo(tmp_path, other=True)
    app = make_app(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        stale = StaleWorkbench(pilot, app, monkeypatch)
        told = await action(stale)
        await wait_for(pilot, told)
        await wait_for(pilot, lambda: stale.tree.sandbox_node("demo") is None)
        await stale.quiet()
        assert stale.sent is not None
        assert stale.sent.naming("demo", unless_it_exists=True) == []
        if not refused_by_the_backend:
            assert stale.sent.naming("demo") == []
        assert stale.sent.listings == 1
        assert "demo" not in await listed(app)
        assert told()
        for repl in stale.main.tabs.repls:
            assert repl.gone


async def gone_repl(stale: StaleWorkbench) -> ReplPane:
    """A REPL of demo that F5 marked gone (demo destroyed by another client)."""
    repl = await stale.repl()
    await stale.destroy()
    await stale.pilot.press("f5")
    await wait_for(stale.pilot, lambda: repl.gone)
    repl.code_input.focus()
    await stale.settled()
    stale.sent = SentRequests(stale.backend, stale.monkeypatch)
    return repl


@pytest.mark.parametrize(
    "key", ["ctrl+r", "alt+k", "alt+d", "alt+r", "alt+p", "alt+z", "alt+g", "alt+a"]
)
async def test_a_repl_tab_known_gone_asks_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """Its fork, checkpoints, inspector and context delete or reset made the sandbox
    again (only a run declined): each now says the context is gone and sends nothing,
    not even a listing."""
    await make_demo(tmp_path)
    app = make_app(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        stale = StaleWorkbench(pilot, app, monkeypatch)
        repl = await gone_repl(stale)
        repl.set_code("1 + 1")
        await pilot.press(key)
        await wait_for(pilot, lambda: (GONE_REFUSAL, repl.title, "warning") in stale.notes.calls)
        await stale.quiet()
        assert stale.sent is not None
        # Nothing naming a sandbox, not even a listing (the health check may come).
        assert [sent for sent in stale.sent.sent if sent != ("GET", "/v1/health")] == []
        assert app.screen is stale.main  # no dialog asks first
        assert not repl.running and repl.code_input.text == "1 + 1"
        assert "demo" not in await listed(app)


async def test_an_action_the_user_starts_lists_the_sandboxes_at_most_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refused_by_the_backend: bool
) -> None:
    """Enter on a collapsed sandbox selects and expands it: its info is read once (it was
    read twice), after one listing; the tree expanding a node to show what was read
    reads nothing more. A new context and a fork list once, and what they read next
    (the info, the fork's history) lists nothing more. A backend that refuses a request
    for a sandbox that is gone is asked for no listing at all."""
    listings = 0 if refused_by_the_backend else 1
    await make_demo(tmp_path)
    app = make_app(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        stale = StaleWorkbench(pilot, app, monkeypatch)
        main = stale.main
        await stale.cursor_to(stale.sandbox_node())
        await stale.settled()
        sent = SentRequests(stale.backend, monkeypatch)
        await pilot.press("enter")
        await wait_for(pilot, lambda: "demo" in main.sandbox_infos)
        await stale.settled()
        assert sent.listings == listings
        assert sent.sent.count(("GET", "/v1/sandboxes/demo")) == 1

        sent = SentRequests(stale.backend, monkeypatch)
        repl = await create_context(pilot, "PERL")
        await wait_for(pilot, lambda: len(main.sandbox_infos["demo"].contexts) == 2)
        await stale.settled()
        assert sent.listings == listings

        sent = SentRequests(stale.backend, monkeypatch)
        await pilot.press("alt+k")
        await wait_for(pilot, lambda: main.active_repl not in (None, repl))
        await wait_for(pilot, lambda: len(main.sandbox_infos["demo"].contexts) == 3)
        await stale.settled()
        assert sent.listings == listings
        assert not stale.notes.errors()


async def test_one_read_of_a_sandbox_s_info_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its info asked for three times by the user while a read is on its way (a click
    highlights, selects and shows the info tab: three listings and three reads, found by
    review) and once after a change: one read (with no listing first: the backend refuses
    it if the sandbox is gone), then one more read for the change, which the first may
    predate."""
    await make_demo(tmp_path)
    app = make_app(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        stale = StaleWorkbench(pilot, app, monkeypatch)
        await stale.quiet()
        sent = SentRequests(stale.backend, monkeypatch)
        answer = held_until_set(monkeypatch, type(stale.backend.sandbox("demo")), "get_info")
        for _ in range(3):
            stale.main.connection.load_sandbox_info("demo")
        stale.main.connection.load_sandbox_info("demo", check_listed=False)
        await pilot.pause()
        answer.set()
        await stale.quiet()
        assert sent.listings == 0
        assert sent.naming("demo").count(("GET", "/v1/sandboxes/demo")) == 2


async def test_a_stale_info_shown_while_a_read_is_on_its_way_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run left the info stale and the user shows it while an older read is still on
    its way: that read may predate the run, so one more follows (it was taken as the
    answer, and the old info stayed; found by review)."""
    await make_demo(tmp_path)
    app = make_app(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        stale = StaleWorkbench(pilot, app, monkeypatch)
        await stale.quiet()
        sent = SentRequests(stale.backend, monkeypatch)
        interpreter_type = type(stale.backend.sandbox("demo").interpreter)
        release = held_until_set(monkeypatch, interpreter_type, "checkpoint_usage")
        stale.main.connection.load_sandbox_info("demo")
        info_read = ("GET", "/v1/sandboxes/demo")
        await wait_for(pilot, lambda: info_read in sent.sent)
        stale.main.stale_infos.add("demo")  # a run finished meanwhile
        stale.main.reload_if_stale("demo")
        release.set()
        await stale.quiet()
        assert sent.sent.count(info_read) == 2


def making_sandboxes_on_first_touch(gateway: LocalGateway) -> Handler:
    """The local gateway, but making a sandbox on any request naming it except DELETE, as
    spec 2.4 has it and a Worker gateway does (the local one makes none for a run in a
    context that is gone), unless the request must find it."""

    async def handle(request: Request) -> Response:
        _, _, below = request.path.partition("/v1/sandboxes/")
        sandbox_id = below.split("/", 1)[0]
        if sandbox_id and request.method != "DELETE" and not must_exist(request.headers):
            await gateway.handle(Request("GET", f"/v1/sandboxes/{sandbox_id}"))
        return await gateway.handle(request)

    return handle


async def test_a_run_s_follow_up_read_of_a_sandbox_destroyed_meanwhile_makes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reads that follow a run (its info, its inspection) ask no listing first, since
    the run just found the sandbox; where the backend can refuse them, they are sent only
    if it exists, so one destroyed in between is not made again, empty."""
    await make_demo(tmp_path)
    data = tmp_path / "data"
    with local_gateway(data) as gateway:
        app = app_over(data, MockTransport(making_sandboxes_on_first_touch(gateway)))
        async with app.run_test(size=(140, 40)) as pilot:
            await until_connected(pilot)
            stale = StaleWorkbench(pilot, app, monkeypatch)
            await wait_for(pilot, lambda: stale.main.connection.refuses_gone_sandboxes)
            await stale.destroy()
            stale.main.connection.load_sandbox_info("demo", check_listed=False)
            await stale.quiet()
            assert stale.sent is not None
            assert stale.sent.naming("demo", unless_it_exists=True) == []
            assert "demo" not in await listed(app)


async def test_a_run_in_a_tab_of_a_sandbox_destroyed_meanwhile_does_not_make_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell asks no listing first (for speed), and the tab did not know demo was gone:
    on a gateway that makes a sandbox on first touch, the run made demo again, empty,
    before it found no context. Now the backend refuses it: the tab says its context is
    gone, the tree drops demo, and nothing made it again."""
    await make_demo(tmp_path)
    data = tmp_path / "data"
    with local_gateway(data) as gateway:
        app = app_over(data, MockTransport(making_sandboxes_on_first_touch(gateway)))
        async with app.run_test(size=(140, 40)) as pilot:
            await until_connected(pilot)
            stale = StaleWorkbench(pilot, app, monkeypatch)
            repl = await stale.repl()
            await stale.destroy()
            repl.code_input.focus()
            repl.set_code("$n + 1")
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: repl.gone)
            await stale.quiet()
            assert stale.sent is not None
            assert stale.sent.naming("demo", unless_it_exists=True) == []
            assert "demo" not in await listed(app)
            await wait_for(pilot, lambda: stale.tree.sandbox_node("demo") is None)
