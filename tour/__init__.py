"""Deterministic app states for the README tour, the snapshot tests and the benchmark.

Every state starts from a fresh local data dir, a fixed clock and fixed context ids,
and is reached by driving the real app with a `Pilot` (keys, as a user would).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Button, Input, TextArea
from textual.widgets.tree import TreeNode

from workbench.api import Backend, FixedClock
from workbench.backends.local import open_local_backend
from workbench.profiles import open_profile_backend
from workbench.tui.app import WorkbenchApp
from workbench.tui.screens.checkpoint_picker_screen import CheckpointPickerScreen
from workbench.tui.screens.main_screen import MainScreen
from workbench.tui.screens.name_screen import NameScreen
from workbench.tui.tree_nodes import DirectoryNode, FileNode, TreeNodeData
from workbench.tui.widgets.live_output import LiveOutput
from workbench.tui.widgets.repl_pane import ReplPane
from workbench.tui.widgets.transcript import Transcript
from workbench.tui.widgets.workbench_tabs import INFO_TAB

FIXED_START_MS = 1_767_225_600_000
"""2026-01-01T00:00:00Z."""
TOUR_SANDBOX = "demo"
TOUR_CELLS = [
    'print "hello from perl\\n" x 2;\nwarn "a warning on stderr\\n";\n6 * 7',
    "my $config = { name => 'demo', sizes => [1, 2, 3] };\n$config",
    'die "something went wrong"',
]
TOUR_FILE = """\
\"\"\"Summarise the orders in orders.json.\"\"\"

import json
from collections import Counter


def summary(path: str = "orders.json") -> dict[str, int]:
    with open(path) as orders:
        return dict(Counter(order["status"] for order in json.load(orders)))


if __name__ == "__main__":
    print(summary())
"""

WorkbenchPilot = Pilot[None]

FOCUS_NOTICE_HOPS = 6
"""Message hops a focus change takes to reach the tabs (the REPL, its pane, the switcher…)."""


def local_backend_factory(
    data_dir: Path, clock: FixedClock | None = None
) -> Callable[[str], Backend]:
    """`local` opens `data_dir` (on `clock`, when given, with a stable description);
    any other name opens the configured profile."""

    def factory(name: str) -> Backend:
        if name != "local":
            return open_profile_backend(name)
        if clock is None:
            return open_local_backend(data_dir, embedded=True)
        backend = open_local_backend(data_dir, clock=clock, embedded=True)
        backend.transport.description = "local (tour data)"
        backend.served_by = ""  # the pictures show the backend, not which process serves it
        return backend

    return factory


def tour_app(data_dir: Path) -> WorkbenchApp:
    """The app on a fixed clock with timings and spinners hidden, and no animations: a
    tab's underline still sliding on a loaded machine was captured half way (CI)."""
    clock = FixedClock(FIXED_START_MS)
    app = WorkbenchApp(
        data_dir=data_dir,
        backend_factory=local_backend_factory(data_dir, clock),
        clock=clock,
        show_measurements=False,
        health_interval=3600,
    )
    app.animation_level = "none"
    return app


@contextmanager
def fixed_context_ids() -> Iterator[None]:
    """Context ids 00000001-0000-…, 00000002-0000-… in creation order, and cursors that
    do not blink (a blink phase would otherwise be captured at random)."""
    counter = iter(range(1, 1_000_000))
    with (
        mock.patch("uuid.uuid4", lambda: uuid.UUID(int=next(counter) << 96)),
        mock.patch.object(TextArea, "_toggle_cursor_blink_visible", lambda self: None),
        mock.patch.object(Input, "_toggle_cursor", lambda self: None),
    ):
        yield


async def wait_for(
    pilot: WorkbenchPilot,
    predicate: Callable[[], object],
    timeout: float = 30,
    describe: Callable[[], object] | None = None,
) -> None:
    """Let the app run until `predicate()` holds (workers finish at their own pace); on
    timeout, say what the app was doing (and `describe()`), for a failure seen only in CI."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            described = f"\n{describe()}" if describe is not None else ""
            raise TimeoutError(
                f"the app did not reach the expected state in {timeout} s\n"
                + app_state(pilot.app)
                + described
            )
        await pilot.pause(0.02)


def app_state(app: App[None]) -> str:
    """The app's screens, workers and shown notifications, one per line."""
    lines = [f"screens: {[type(screen).__name__ for screen in app.screen_stack]}"]
    lines += [
        f"worker {worker.name} ({worker.group}): {worker.state.name}" for worker in app.workers
    ]
    lines += [
        f"notification {note.title!r}: {note.message!r}"
        for note in app._notifications  # Textual keeps no public list
    ]
    return "\n".join(lines)


def workbench(pilot: WorkbenchPilot) -> WorkbenchApp:
    app = pilot.app
    assert isinstance(app, WorkbenchApp)
    return app


def main_screen(pilot: WorkbenchPilot) -> MainScreen:
    return workbench(pilot).main_screen


async def until_connected(pilot: WorkbenchPilot) -> None:
    main = main_screen(pilot)
    await wait_for(pilot, lambda: main.status.state == "connected" and bool(main.runtimes))
    await wait_for(pilot, lambda: bool(main.sandbox_tree.root.children))


async def create_sandbox(pilot: WorkbenchPilot, sandbox_id: str = TOUR_SANDBOX) -> None:
    main = main_screen(pilot)
    await pilot.press("f2")
    await pilot.press(*sandbox_id, "enter")
    await wait_for(pilot, lambda: sandbox_id in main.sandbox_infos)
    await pilot.pause()


async def create_context(pilot: WorkbenchPilot, binding: str, env_line: str = "") -> ReplPane:
    """F3, choose `binding`, optionally type one env line, create; the new REPL."""
    app = workbench(pilot)
    main = app.main_screen
    open_before = set(main.tabs.repls)
    await pilot.press("f3")
    await pilot.pause()
    dialog = app.screen
    dialog.query_one("#binding").value = binding  # type: ignore[attr-defined]
    if env_line:
        dialog.query_one("#context-env TextArea").focus()
        await pilot.press(*env_line)
    dialog.query_one("#create", Button).press()
    await wait_for(pilot, lambda: main.active_repl not in (None, *open_before))
    repl = main.active_repl
    assert repl is not None
    await wait_for(pilot, lambda: repl.code_input.has_focus)
    # The tabs learn of that focus a few messages later and then activate its tab: let
    # that happen now, not after a tab switch that follows (`state_sandbox_info`).
    for _ in range(FOCUS_NOTICE_HOPS):
        await pilot.pause()
    return repl


async def opened_repl(pilot: WorkbenchPilot, context_id: str) -> ReplPane:
    """The context's REPL once its tab holds it composed (a pane is in the tabs a few
    messages before its transcript and input are)."""
    tabs = main_screen(pilot).tabs

    def composed() -> bool:
        repl = tabs.repl_for(context_id)
        return repl is not None and bool(repl.query(Transcript))

    await wait_for(pilot, composed)
    repl = tabs.repl_for(context_id)
    assert repl is not None
    return repl


async def run_cell(pilot: WorkbenchPilot, repl: ReplPane, code: str) -> None:
    before = len(repl.transcript.cells)
    repl.code_input.focus()
    repl.set_code(code)
    await pilot.press("ctrl+r")
    await wait_for(pilot, lambda: len(repl.transcript.cells) > before)
    await pilot.pause()


async def expanded_workspace(
    pilot: WorkbenchPilot, app: WorkbenchApp, sandbox_id: str
) -> TreeNode[TreeNodeData]:
    """Expand the sandbox's node and its `/workspace` in the tree; that node, listed."""
    node = app.main_screen.sandbox_tree.sandbox_node(sandbox_id)
    assert node is not None
    node.expand()
    await wait_for(pilot, lambda: any(isinstance(c.data, DirectoryNode) for c in node.children))
    workspace = next(c for c in node.children if isinstance(c.data, DirectoryNode))
    workspace.expand()
    await wait_for(pilot, lambda: any(isinstance(c.data, FileNode) for c in workspace.children))
    return workspace


async def state_start(pilot: WorkbenchPilot) -> None:
    """Connected, no sandboxes yet."""
    await until_connected(pilot)


async def state_sandbox_info(pilot: WorkbenchPilot) -> None:
    """A sandbox with env vars and a Perl context, its info panel shown."""
    app = workbench(pilot)
    main = app.main_screen
    await until_connected(pilot)
    await create_sandbox(pilot)
    await pilot.press("f4")
    await pilot.pause()
    await pilot.press(*"API_URL=https://example.test", "enter", *"API_TOKEN=s3cret")
    app.screen.query_one("#save", Button).press()
    await wait_for(pilot, lambda: bool(main.sandbox_infos[TOUR_SANDBOX].env_vars))
    await create_context(pilot, "PERL")
    await wait_for(pilot, lambda: bool(main.sandbox_infos[TOUR_SANDBOX].contexts))
    main.show_tab(INFO_TAB)  # focus goes to the sidebar, which drives the info tab
    main.connection.load_sandbox_info(TOUR_SANDBOX)  # and what its checkpoints hold
    checkpoints = main.info_panel.checkpoints
    await wait_for(pilot, lambda: checkpoints.get(TOUR_SANDBOX, "").startswith("0, "))
    await pilot.pause()


async def state_repl(pilot: WorkbenchPilot) -> None:
    """A Perl REPL with stdout, stderr, a text and a JSON result, and an error."""
    await until_connected(pilot)
    await create_sandbox(pilot)
    repl = await create_context(pilot, "PERL")
    for code in TOUR_CELLS:
        await run_cell(pilot, repl, code)
    repl.set_code("# Up walks history; alt+h searches it")
    await pilot.pause()


async def state_file_view(pilot: WorkbenchPilot) -> None:
    """A Python file of the sandbox's `/workspace`, opened from the tree."""
    app = workbench(pilot)
    await until_connected(pilot)
    assert app.backend is not None
    await app.backend.sandbox(TOUR_SANDBOX).write_file("/workspace/report.py", TOUR_FILE)
    await pilot.press("f5")  # the sidebar learns of the sandbox the write created
    await wait_for(pilot, lambda: app.main_screen.sandbox_tree.sandbox_node(TOUR_SANDBOX))
    workspace = await expanded_workspace(pilot, app, TOUR_SANDBOX)
    tree = app.main_screen.sandbox_tree
    tree.focus()
    tree.move_cursor(workspace.children[0])
    await pilot.press("enter")
    await wait_for(pilot, lambda: app.main_screen.tabs.active_file is not None)
    await pilot.pause()


TOUR_TRAINING = """\
import time
for epoch in range(1, 4):
    print(f"epoch {epoch}: loss {1 / epoch:.3f}")
    time.sleep(0.2)
print("saving the model…")
time.sleep(600)
"""


async def state_streaming(pilot: WorkbenchPilot) -> None:
    """A Python cell still running: its code, and its output as it comes, under the
    transcript."""
    await until_connected(pilot)
    await create_sandbox(pilot)
    repl = await create_context(pilot, "PYTHON")
    live = repl.query_one(LiveOutput)
    repl.set_code(TOUR_TRAINING)
    await pilot.press("ctrl+r")
    # The first Python run starts an engine process: seconds, more on a loaded machine
    # (a full suite run once took longer than 30 s here).
    # An output line (the live area shows the cell's code above it, `print("saving…")` too).
    saving = "saving the model…"
    await wait_for(pilot, lambda: any(line.text.rstrip() == saving for line in live.lines), 90)
    await pilot.pause()


async def state_checkpoints(pilot: WorkbenchPilot) -> None:
    """A Perl context with two checkpoints, and a fork of it; the context's checkpoint
    picker open."""
    app = workbench(pilot)
    main = app.main_screen
    await until_connected(pilot)
    await create_sandbox(pilot)
    origin = await create_context(pilot, "PERL")
    for code, name in [
        ("our @weights = (0.5, 0.25)", "baseline"),
        ("push @weights, 0.125", "tuned"),
    ]:
        await run_cell(pilot, origin, code)
        await pilot.press("alt+p")
        await wait_for(pilot, lambda: isinstance(app.screen, NameScreen))
        await pilot.press(*name, "enter")
        await wait_for(pilot, lambda: not isinstance(app.screen, NameScreen))
    # Saved once the backend lists both (and their toasts posted).
    assert app.backend is not None
    interpreter = app.backend.sandbox(TOUR_SANDBOX).interpreter
    deadline = time.monotonic() + 30
    while len((await interpreter.list_checkpoints(origin.context.id)).checkpoints) < 2:
        if time.monotonic() > deadline:
            raise TimeoutError("the two checkpoints were not saved in 30 s")
        await pilot.pause(0.05)
    await pilot.press("alt+k")
    await wait_for(pilot, lambda: main.active_repl not in (None, origin))
    fork = main.active_repl
    assert fork is not None
    await wait_for(pilot, lambda: len(fork.transcript.cells) == 2)
    main.open_context(origin.sandbox_id, origin.context)  # checkpoints are the origin's
    await wait_for(pilot, lambda: main.active_repl is origin and origin.code_input.has_focus)
    app.clear_notifications()  # now: the dialog below would leave them painted behind it
    await pilot.pause()
    await pilot.press("alt+z")
    await wait_for(pilot, lambda: isinstance(app.screen, CheckpointPickerScreen))
    await pilot.pause()


async def state_create_context_dialog(pilot: WorkbenchPilot) -> None:
    """The new-context dialog with an invalid env key flagged as typed."""
    await until_connected(pilot)
    await create_sandbox(pilot)
    await pilot.press("f3")
    await pilot.pause()
    workbench(pilot).screen.query_one("#context-env TextArea").focus()
    await pilot.press(*"GOOD=1", "enter", *"1BAD=2")
    await pilot.pause()


async def state_create_sandbox_dialog(pilot: WorkbenchPilot) -> None:
    """The new-sandbox dialog rejecting a reserved id."""
    await until_connected(pilot)
    await pilot.press("f2")
    await pilot.press(*"admin")
    await pilot.pause()


async def state_history_search(pilot: WorkbenchPilot) -> None:
    await state_repl(pilot)
    await pilot.press("alt+h")
    await pilot.press(*"conf")
    await pilot.pause()


async def state_help(pilot: WorkbenchPilot) -> None:
    await state_repl(pilot)
    await pilot.press("f1")
    await pilot.pause()


async def state_runtimes(pilot: WorkbenchPilot) -> None:
    await until_connected(pilot)
    await pilot.press("f12")
    await pilot.pause()


async def state_command_palette(pilot: WorkbenchPilot) -> None:
    await state_repl(pilot)
    await pilot.press("ctrl+p")
    await pilot.press(*"context")
    await pilot.pause(0.5)


TOUR_INSPECTED = [
    'orders = [{"id": n, "total": round(n * 7.5, 2)} for n in range(1, 41)]',
    'totals = [order["total"] for order in orders]\nmean = sum(totals) / len(totals)\nmean',
    "import dataclasses\n\n"
    "@dataclasses.dataclass\n"
    "class Basket:\n"
    "    owner: str\n"
    "    items: list\n\n"
    'basket = Basket("ada", ["tea", "scones"])\nnote = "shipped\\ntoday"',
]


async def state_inspector(pilot: WorkbenchPilot) -> None:
    """A Python context's names in the inspector beside its REPL (`alt+g`)."""
    await until_connected(pilot)
    await create_sandbox(pilot)
    repl = await create_context(pilot, "PYTHON")
    for code in TOUR_INSPECTED:
        await run_cell(pilot, repl, code)
    await pilot.press("alt+g")
    table = repl.inspector.table
    await wait_for(pilot, lambda: table.row_count == 7, 60)
    # A table measures new rows when it is next idle; drawn before, they are cut to the
    # header's width (a loaded machine once caught it so).
    longest = max(len(str(row_key.value)) for row_key in table.rows)
    await wait_for(pilot, lambda: table.ordered_columns[0].content_width >= longest)
    table.move_cursor(row=1)
    await pilot.pause()
    # The inspector narrowed the transcript: its cells are rendered again for that width.
    await wait_for(pilot, lambda: repl.transcript.fits_its_width)


async def settle(pilot: WorkbenchPilot) -> None:
    """Drop the toasts (they expire on the wall clock) and let the screen settle."""
    workbench(pilot).clear_notifications()
    await pilot.pause(0.2)


TOUR_STATES: dict[str, Callable[[WorkbenchPilot], Awaitable[None]]] = {
    "start": state_start,
    "sandbox-info": state_sandbox_info,
    "repl": state_repl,
    "file-view": state_file_view,
    "streaming": state_streaming,
    "checkpoints": state_checkpoints,
    "inspector": state_inspector,
    "create-sandbox": state_create_sandbox_dialog,
    "create-context": state_create_context_dialog,
    "history-search": state_history_search,
    "help": state_help,
    "runtimes": state_runtimes,
    "command-palette": state_command_palette,
}
"""Tour state name → the steps that reach it from a fresh start."""
