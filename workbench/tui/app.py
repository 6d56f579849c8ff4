"""The workbench Textual app: sidebar tree, sandbox info, runtimes and a REPL per context.

Background work runs in Textual workers that only call the headless API and post
messages (`workbench.tui.messages`); the handlers here own every widget change.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial, wraps
from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Footer, Input, TabbedContent, TabPane, Tree

from workbench.api.client import Backend
from workbench.api.engines import EngineInfo, EnginePrepareError
from workbench.api.errors import SandboxError
from workbench.api.types import CodeContext, ContextInfo, RuntimeInfo, SandboxInfo
from workbench.config import Config, ConfigError
from workbench.core.clock import SYSTEM_CLOCK, Clock
from workbench.paths import data_dir as resolve_data_dir
from workbench.profiles import LOCAL, UnknownProfileError, open_profile_backend, profile_names
from workbench.sync import (
    EventKind,
    FolderSync,
    SyncEvent,
    SyncReport,
    remote_path,
    sync_state_file,
)
from workbench.sync.runner import entry_runner_code
from workbench.tui.error_messages import describe_error
from workbench.tui.formatting import short_id
from workbench.tui.history_store import HISTORY_FILE_NAME, LocalHistoryStore
from workbench.tui.key_bindings import (
    BACKEND_ACTIONS,
    PALETTE_TITLES,
    REPL_ACTIONS,
    SANDBOX_ACTIONS,
    WORKBENCH_BINDINGS,
)
from workbench.tui.messages import (
    BackendFailed,
    BackendOpened,
    CellFinished,
    ContextOpened,
    ContextRemoved,
    DirectoryListed,
    EnginePrepared,
    EngineProgress,
    EngineStatesLoaded,
    HealthChecked,
    OperationFailed,
    RunAbandoned,
    RuntimesLoaded,
    SandboxDestroyed,
    SandboxesLoaded,
    SandboxInfoLoaded,
    WatchEnded,
    WatchEventReceived,
    WatchRunStarted,
    WatchSynced,
)
from workbench.tui.palette_commands import PaletteCommand, WorkbenchCommands
from workbench.tui.screens.cell_picker_screen import CellCopyRequest, CellPickerScreen
from workbench.tui.screens.confirm_screen import ConfirmScreen
from workbench.tui.screens.create_context_screen import ContextRequest, CreateContextScreen
from workbench.tui.screens.create_sandbox_screen import CreateSandboxScreen
from workbench.tui.screens.env_vars_screen import EnvVarsScreen
from workbench.tui.screens.export_screen import ExportScreen
from workbench.tui.screens.help_screen import HelpScreen
from workbench.tui.screens.history_search_screen import HistorySearchScreen
from workbench.tui.screens.profile_picker_screen import ProfilePickerScreen
from workbench.tui.screens.watch_screen import WatchRequest, WatchScreen
from workbench.tui.transcript_cell import CellPart, TranscriptCell
from workbench.tui.transcript_export import default_export_path, write_transcript
from workbench.tui.tree_nodes import ContextNode, DirectoryNode, SandboxNode, TreeNodeData
from workbench.tui.widgets.code_input import CodeInput
from workbench.tui.widgets.info_panel import InfoPanel
from workbench.tui.widgets.repl_pane import ReplPane
from workbench.tui.widgets.runtimes_table import RuntimesTable
from workbench.tui.widgets.sandbox_tree import WORKSPACE, SandboxTree
from workbench.tui.widgets.status_bar import StatusBar

BackendFactory = Callable[[str], Backend]

ABANDONED_NOTE = "abandoned request (the remote guest runs until its fuel runs out)"
HEALTH_INTERVAL_SECONDS = 15.0
INFO_TAB = "info-tab"
RUNTIMES_TAB = "runtimes-tab"
WATCH_POLL_SECONDS = 0.5
MAX_LISTED_ISSUES = 3

APP_HELP = """\
## sandbox-workbench

Browse the profile's sandboxes in the sidebar, open a code context to get a REPL,
and run cells. **ctrl+p** opens the command palette with every action; **F1**
shows help for the focused widget.
"""


ReportHandler = TypeVar("ReportHandler", bound=Callable[..., Any])


def while_open(handler: ReportHandler) -> ReportHandler:
    """Skip a worker report that arrives after the main layout is gone (app exit)."""

    @wraps(handler)
    def guarded(app: WorkbenchApp, message: Message) -> Any:
        if not app.tabs.is_attached:
            return None
        return handler(app, message)

    return cast(ReportHandler, guarded)


def context_from_info(info: ContextInfo) -> CodeContext:
    return CodeContext(
        info.id, info.binding, info.language, info.cwd, info.created_at, info.last_used
    )


def repl_tab_id(context_id: str) -> str:
    return f"repl-{context_id}"


@dataclass
class ActiveWatch:
    """The app's folder watch (one at a time); `stop` ends its worker."""

    watch_id: int
    sandbox_id: str
    sync: FolderSync
    stop: asyncio.Event
    context_id: str | None = None
    entry: str | None = None
    runner: str | None = None

    @property
    def folder(self) -> Path:
        return self.sync.root


def issues_text(issues: list[str]) -> str:
    shown = "\n".join(issues[:MAX_LISTED_ISSUES])
    more = len(issues) - MAX_LISTED_ISSUES
    return shown + (f"\n… and {more} more" if more > 0 else "")


class WorkbenchApp(App[None]):
    """sandbox-workbench: sandboxes, contexts and a REPL per context."""

    TITLE = "sandbox-workbench"
    CSS_PATH = "app.tcss"
    COMMANDS = App.COMMANDS | {WorkbenchCommands}
    HELP = APP_HELP

    BINDINGS: ClassVar[list[BindingType]] = list(WORKBENCH_BINDINGS)

    def __init__(
        self,
        profile: str = LOCAL,
        data_dir: Path | None = None,
        *,
        backend_factory: BackendFactory | None = None,
        config: Config | None = None,
        clock: Clock = SYSTEM_CLOCK,
        show_measurements: bool = True,
        health_interval: float = HEALTH_INTERVAL_SECONDS,
    ) -> None:
        super().__init__()
        self.profile = profile
        self.config_problem: str | None = None
        if config is None:
            try:
                config = Config.load()
            except ConfigError as error:
                self.config_problem = str(error)
                config = Config()
        self.config = config
        self.backend_factory: BackendFactory = backend_factory or (
            lambda name: open_profile_backend(name, data_dir=data_dir)
        )
        self.data_dir = resolve_data_dir(data_dir)
        """The local data dir: history, exports and folder-sync state (whatever the profile)."""
        self.history_store = LocalHistoryStore(self.data_dir / HISTORY_FILE_NAME)
        self.clock = clock
        self.show_measurements = show_measurements
        self.health_interval = health_interval
        self.backend: Backend | None = None
        self.runtimes: list[RuntimeInfo] = []
        self.engine_states: dict[str, EngineInfo] = {}
        self.engine_progress_labels: dict[str, str] = {}
        self.sandbox_infos: dict[str, SandboxInfo] = {}
        self.highlighted_sandbox_id: str | None = None
        self.sandbox_tree = SandboxTree(id="sidebar")
        self.tabs = TabbedContent(id="tabs", initial=INFO_TAB)
        self.info_panel = InfoPanel(self.clock.now_ms, id="info")
        self.runtimes_table = RuntimesTable(id="runtimes")
        self.status = StatusBar(id="status")
        self.folder_watch: ActiveWatch | None = None
        self.watch_count = 0

    # ----------------------------------------------------------------- layout

    def compose(self) -> ComposeResult:
        with Horizontal(id="body"):
            yield self.sandbox_tree
            with self.tabs:
                with TabPane("Sandbox", id=INFO_TAB):
                    yield self.info_panel
                with TabPane("Runtimes", id=RUNTIMES_TAB):
                    yield self.runtimes_table
        yield self.status
        yield Footer()

    async def on_unmount(self) -> None:
        if self.folder_watch is not None:
            self.folder_watch.stop.set()
        if self.backend is not None:
            await self.backend.aclose()

    def on_mount(self) -> None:
        if self.config.keys:
            self.set_keymap(self.config.keys)
        if self.config.theme and self.config.theme in self.available_themes:
            self.theme = self.config.theme
        self.theme_changed_signal.subscribe(self, self.remember_theme)
        if self.config_problem:
            self.notify(self.config_problem, title="Config", severity="error")
        self.set_interval(self.health_interval, self.check_health)
        self.switch_profile(self.profile)

    @property
    def active_repl(self) -> ReplPane | None:
        pane = self.tabs.active_pane
        if pane is None:
            return None
        found = pane.query(ReplPane)
        return found.first() if found else None

    @property
    def selected_sandbox_id(self) -> str | None:
        repl = self.active_repl
        return repl.sandbox_id if repl is not None else self.highlighted_sandbox_id

    def repl_for(self, context_id: str) -> ReplPane | None:
        found = self.tabs.query(f"#{repl_tab_id(context_id)} ReplPane")
        return found.first(ReplPane) if found else None

    def show_tab(self, tab_id: str) -> None:
        """Activate the sandbox or the runtimes tab. Focus inside the REPL being hidden
        moves first to what drives that tab (the sidebar, the runtimes table): Textual
        would move it to a sibling in the hidden pane, which switches straight back."""
        repl, focused = self.active_repl, self.focused
        if repl is not None and focused is not None and repl in focused.ancestors_with_self:
            target: Widget = self.runtimes_table if tab_id == RUNTIMES_TAB else self.sandbox_tree
            target.screen.set_focus(target)
        self.tabs.active = tab_id

    # ----------------------------------------------------------------- backend

    def switch_profile(self, profile: str) -> None:
        """Drop everything of the current backend and open `profile`'s."""
        for worker in self.workers:
            if worker.group.startswith("run-") or worker.group == "backend-call":
                worker.cancel()
        for pane in list(self.tabs.query(ReplPane)):
            self.tabs.remove_pane(repl_tab_id(pane.context.id))
        if self.folder_watch is not None:
            self.stop_watch("the profile changed")
        self.profile = profile
        self.sandbox_infos.clear()
        self.highlighted_sandbox_id = None
        self.info_panel.info = None
        self.sandbox_tree.show_profile(profile)
        self.status.profile = profile
        self.status.state = "connecting"
        self.status.detail = ""
        self.open_backend(profile)

    @work(thread=True, exclusive=True, group="open-backend", exit_on_error=False)
    def open_backend(self, profile: str) -> None:
        try:
            backend = self.backend_factory(profile)
        except (UnknownProfileError, ConfigError, SandboxError, OSError) as error:
            self.post_message(BackendFailed(profile, str(error)))
            return
        self.post_message(BackendOpened(profile, backend))

    @on(BackendOpened)
    @while_open
    async def backend_opened(self, message: BackendOpened) -> None:
        if message.profile != self.profile:
            await message.backend.aclose()
            return
        previous, self.backend = self.backend, message.backend
        if previous is not None and previous is not message.backend:
            await previous.aclose()
        self.status.detail = message.backend.description
        self.check_health()
        self.load_runtimes()
        self.load_sandboxes()

    @on(BackendFailed)
    @while_open
    def backend_failed(self, message: BackendFailed) -> None:
        self.status.state = "unreachable"
        self.status.detail = message.reason
        self.notify(
            message.reason, title=f"Cannot open profile {message.profile}", severity="error"
        )

    def check_health(self) -> None:
        if self.backend is not None:
            self.run_health_check(self.backend, self.profile)

    @work(exclusive=True, group="health", exit_on_error=False)
    async def run_health_check(self, backend: Backend, profile: str) -> None:
        try:
            await backend.health()
        except Exception as error:
            self.post_message(HealthChecked(profile, False, describe_error(error)))
            return
        self.post_message(HealthChecked(profile, True, backend.description))

    @on(HealthChecked)
    @while_open
    def health_checked(self, message: HealthChecked) -> None:
        if message.profile != self.profile:
            return
        self.status.state = "connected" if message.healthy else "unreachable"
        self.status.detail = message.detail

    @on(OperationFailed)
    @while_open
    def operation_failed(self, message: OperationFailed) -> None:
        self.notify(message.reason, title=message.title, severity="error", timeout=8)

    # ----------------------------------------------------------------- loading

    def call_backend(self, title: str, call: Callable[[Backend], Any]) -> None:
        """Run `call(backend)` in a worker; failures become error notifications."""
        if self.backend is None:
            self.notify("The backend is not open yet.", severity="warning")
            return
        self.backend_call(self.backend, title, call)

    @work(group="backend-call", exit_on_error=False)
    async def backend_call(
        self, backend: Backend, title: str, call: Callable[[Backend], Any]
    ) -> None:
        try:
            await call(backend)
        except Exception as error:
            self.post_message(OperationFailed(title, describe_error(error)))

    def load_sandboxes(self) -> None:
        async def load(backend: Backend) -> None:
            self.post_message(SandboxesLoaded(await backend.list_sandboxes()))

        self.call_backend("Listing sandboxes failed", load)

    def load_runtimes(self) -> None:
        async def load(backend: Backend) -> None:
            if backend.engines is not None:
                self.post_message(EngineStatesLoaded(await backend.engines.statuses()))
            self.post_message(RuntimesLoaded(await backend.runtimes()))

        self.call_backend("Listing runtimes failed", load)

    async def prepare_engine_in_worker(self, backend: Backend, language: str) -> str | None:
        """Worker body: prepare a local engine, reporting progress as messages; returns an
        error message or None."""
        assert backend.engines is not None

        def progress(label: str, fraction: float) -> None:
            self.post_message(EngineProgress(language, label, fraction))

        try:
            await backend.engines.prepare(language, progress)
        except EnginePrepareError as error:
            self.post_message(EnginePrepared(language, str(error)))
            return str(error)
        self.post_message(EnginePrepared(language, None))
        return None

    @work(group="prepare-engine", exit_on_error=False)
    async def prepare_engine(self, backend: Backend, language: str) -> None:
        await self.prepare_engine_in_worker(backend, language)

    def load_sandbox_info(self, sandbox_id: str) -> None:
        async def load(backend: Backend) -> None:
            self.post_message(SandboxInfoLoaded(await backend.sandbox(sandbox_id).get_info()))

        self.call_backend(f"Loading {sandbox_id} failed", load)

    def list_directory(self, sandbox_id: str, path: str) -> None:
        async def load(backend: Backend) -> None:
            listing = await backend.sandbox(sandbox_id).list_files(path, include_hidden=True)
            self.post_message(DirectoryListed(sandbox_id, path, listing.files))

        self.call_backend(f"Listing {path} failed", load)

    @on(SandboxesLoaded)
    @while_open
    def sandboxes_loaded(self, message: SandboxesLoaded) -> None:
        self.sandbox_tree.show_sandboxes(message.sandboxes)
        known = {summary.id for summary in message.sandboxes}
        for sandbox_id in list(self.sandbox_infos):
            if sandbox_id not in known:
                del self.sandbox_infos[sandbox_id]
        for summary in message.sandboxes:
            node = self.sandbox_tree.sandbox_node(summary.id)
            if node is not None and node.is_expanded:
                self.load_sandbox_info(summary.id)

    @on(RuntimesLoaded)
    @while_open
    def runtimes_loaded(self, message: RuntimesLoaded) -> None:
        self.runtimes = message.runtimes
        self.runtimes_table.show_runtimes(message.runtimes, self.engine_states)

    @on(EngineStatesLoaded)
    @while_open
    def engine_states_loaded(self, message: EngineStatesLoaded) -> None:
        self.engine_states = {engine.language: engine for engine in message.engines}

    @on(EngineProgress)
    @while_open
    def engine_progress(self, message: EngineProgress) -> None:
        for runtime in self.runtimes:
            if runtime.language == message.language:
                text = f"preparing: {message.label} ({message.fraction:.0%})"
                self.runtimes_table.show_engine_state(runtime.binding, text)
        if message.label != self.engine_progress_labels.get(message.language):
            self.engine_progress_labels[message.language] = message.label
            self.notify(
                f"{message.label} ({message.fraction:.0%})",
                title=f"Preparing the {message.language} engine",
                timeout=3,
            )

    @on(EnginePrepared)
    @while_open
    def engine_prepared(self, message: EnginePrepared) -> None:
        self.engine_progress_labels.pop(message.language, None)
        if message.error is not None:
            self.notify(message.error, title="Engine not prepared", severity="error")
        else:
            self.notify(f"The {message.language} engine is ready.", title="Engine prepared")
        self.load_runtimes()

    @on(SandboxInfoLoaded)
    @while_open
    def sandbox_info_loaded(self, message: SandboxInfoLoaded) -> None:
        info = message.info
        first_load = info.id not in self.sandbox_infos
        self.sandbox_infos[info.id] = info
        self.sandbox_tree.show_sandbox_info(info)
        if self.selected_sandbox_id == info.id or self.info_panel.info is None:
            self.info_panel.info = info
        node = self.sandbox_tree.sandbox_node(info.id)
        if node is not None and info.id == self.highlighted_sandbox_id:
            self.sandbox_tree.move_cursor(node)
        if first_load:
            self.refresh_bindings()

    @on(DirectoryListed)
    @while_open
    def directory_listed(self, message: DirectoryListed) -> None:
        self.sandbox_tree.show_directory(message.sandbox_id, message.path, message.files)

    # ----------------------------------------------------------------- tree

    @on(Tree.NodeExpanded, "#sidebar")
    def node_expanded(self, event: Tree.NodeExpanded[TreeNodeData]) -> None:
        data = event.node.data
        if isinstance(data, SandboxNode):
            self.load_sandbox_info(data.sandbox_id)
        elif isinstance(data, DirectoryNode):
            self.list_directory(data.sandbox_id, data.path)

    @on(Tree.NodeHighlighted, "#sidebar")
    def node_highlighted(self, event: Tree.NodeHighlighted[TreeNodeData]) -> None:
        sandbox_id = self.sandbox_tree.selected_sandbox_id
        if sandbox_id is None or sandbox_id == self.highlighted_sandbox_id:
            return
        self.highlighted_sandbox_id = sandbox_id
        cached = self.sandbox_infos.get(sandbox_id)
        if cached is not None:
            self.info_panel.info = cached
        self.refresh_bindings()

    @on(Tree.NodeSelected, "#sidebar")
    def node_selected(self, event: Tree.NodeSelected[TreeNodeData]) -> None:
        data = event.node.data
        if isinstance(data, ContextNode):
            self.open_context(data.sandbox_id, context_from_info(data.context))
        elif isinstance(data, SandboxNode):
            self.highlighted_sandbox_id = data.sandbox_id
            self.tabs.active = INFO_TAB
            self.load_sandbox_info(data.sandbox_id)

    @on(TabbedContent.TabActivated)
    def tab_activated(self, event: TabbedContent.TabActivated) -> None:
        repl = self.active_repl
        if repl is not None:
            repl.code_input.focus()
        self.refresh_bindings()

    # ----------------------------------------------------------------- contexts

    def open_context(self, sandbox_id: str, context: CodeContext) -> None:
        if self.repl_for(context.id) is not None:
            self.tabs.active = repl_tab_id(context.id)
            return
        profile = self.profile

        async def load_history(backend: Backend) -> None:
            server = await backend.sandbox(sandbox_id).interpreter.history(context.id)
            codes = [entry.code for entry in server]
            if not codes and profile != LOCAL:
                codes = self.history_store.entries(profile, sandbox_id, context.id)
            self.post_message(ContextOpened(sandbox_id, context, codes))

        self.call_backend("Loading the context's history failed", load_history)

    @on(ContextOpened)
    @while_open
    async def context_opened(self, message: ContextOpened) -> None:
        context = message.context
        if self.repl_for(context.id) is None:
            pane = ReplPane(
                message.sandbox_id,
                context,
                message.history,
                show_measurements=self.show_measurements,
            )
            title = f"{context.binding} {short_id(context.id)}"
            await self.tabs.add_pane(TabPane(title, pane, id=repl_tab_id(context.id)))
        self.tabs.active = repl_tab_id(context.id)

    def create_context(self, sandbox_id: str, request: ContextRequest) -> None:
        async def create(backend: Backend) -> None:
            context = await backend.sandbox(sandbox_id).interpreter.create_code_context(
                request.binding, request.cwd, request.env_vars or None
            )
            self.post_message(ContextOpened(sandbox_id, context, []))
            self.post_message(SandboxInfoLoaded(await backend.sandbox(sandbox_id).get_info()))

        self.call_backend("Creating the context failed", create)

    @on(ContextRemoved)
    @while_open
    async def context_removed(self, message: ContextRemoved) -> None:
        if self.repl_for(message.context_id) is not None:
            await self.tabs.remove_pane(repl_tab_id(message.context_id))
        self.load_sandbox_info(message.sandbox_id)

    # ----------------------------------------------------------------- running

    @on(CellFinished)
    @while_open
    def cell_finished(self, message: CellFinished) -> None:
        pane = self.repl_for(message.context_id)
        if pane is None:
            return
        result = message.result
        number = len(pane.transcript.cells) + 1
        if result is not None and result.execution_count is not None:
            number = result.execution_count
        pane.run_status.stop()
        cell = TranscriptCell(
            number, message.code, pane.context.language, result, message.failure, message.label
        )
        # A watch run's generated code stays out of the REPL's input history.
        pane.add_cell(message.code, cell, remember=message.label is None)
        self.load_sandbox_info(message.sandbox_id)
        if self.profile != LOCAL and message.label is None:
            self.history_store.append(
                self.profile, message.sandbox_id, message.context_id, message.code
            )
        if result is not None and result.session is not None:
            for note in result.session.notes:
                self.notify(
                    note,
                    title="REPL state",
                    severity="warning" if result.session.state_lost else "information",
                )

    async def run_cell_request(
        self,
        backend: Backend,
        sandbox_id: str,
        context_id: str,
        code: str,
        label: str | None = None,
    ) -> None:
        """Worker body: one execution; the outcome (or failure) comes back as a message.
        A local engine that is not prepared yet is prepared first, with progress."""
        pane = self.repl_for(context_id)
        language = pane.context.language if pane is not None else None
        if language is not None and backend.engines is not None:
            state = next(
                (item for item in await backend.engines.statuses() if item.language == language),
                None,
            )
            if state is not None and not state.ready:
                problem = await self.prepare_engine_in_worker(backend, language)
                if problem is not None:
                    self.post_message(
                        CellFinished(sandbox_id, context_id, code, None, problem, label)
                    )
                    return
        try:
            result = await backend.sandbox(sandbox_id).interpreter.run_code(
                code, context=context_id
            )
        except Exception as error:
            self.post_message(
                CellFinished(sandbox_id, context_id, code, None, describe_error(error), label)
            )
            return
        self.post_message(CellFinished(sandbox_id, context_id, code, result, None, label))

    @work(exit_on_error=False)
    async def cancel_cell(self, backend: Backend, sandbox_id: str, context_id: str) -> None:
        try:
            interrupted = await backend.sandbox(sandbox_id).cancel()
        except Exception as error:
            self.post_message(OperationFailed("Cancel failed", describe_error(error)))
            return
        if not interrupted:
            self.post_message(RunAbandoned(sandbox_id, context_id))

    @on(RunAbandoned)
    @while_open
    def run_abandoned(self, message: RunAbandoned) -> None:
        for worker in self.workers:
            if worker.group == f"run-{message.context_id}":
                worker.cancel()
        pane = self.repl_for(message.context_id)
        if pane is None or not pane.running:
            return
        code = pane.pending_code
        pane.run_status.stop()
        number = len(pane.transcript.cells) + 1
        pane.add_cell(
            code, TranscriptCell(number, code, pane.context.language, None, ABANDONED_NOTE)
        )
        self.notify(ABANDONED_NOTE, title="Cancelled", severity="warning")

    # ----------------------------------------------------------------- actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in BACKEND_ACTIONS:
            return self.backend is not None
        if action in SANDBOX_ACTIONS:
            return self.backend is not None and self.selected_sandbox_id is not None
        if action in REPL_ACTIONS:
            return self.active_repl is not None
        if action == "unwatch":
            return self.folder_watch is not None
        if action == "prepare_engine":
            return self.backend is not None and self.backend.engines is not None
        if action == "toggle_remote":
            return self.profile != LOCAL or self.config.last_remote is not None
        return True

    def action_help(self) -> None:
        focused: Widget | None = self.focused
        help_markdown = APP_HELP
        node: Any = focused
        while node is not None:
            text = getattr(node, "HELP", None)
            if isinstance(text, str) and text and node is not self:
                help_markdown = text
                break
            node = node.parent
        rows = [
            (
                self.get_key_display(active.binding),
                active.binding.description,
                active.binding.id or "",
            )
            for active in self.screen.active_bindings.values()
            if active.binding.description
        ]
        # The workbench's own bindings (they have ids) first, then the widget's.
        rows.sort(key=lambda row: (row[2] == "", row[2], row[1]))
        self.push_screen(HelpScreen(help_markdown, rows))

    def action_refresh(self) -> None:
        self.load_sandboxes()
        self.load_runtimes()
        sandbox_id = self.selected_sandbox_id
        if sandbox_id is not None:
            self.load_sandbox_info(sandbox_id)
        self.check_health()

    def action_show_runtimes(self) -> None:
        self.show_tab(RUNTIMES_TAB)

    def action_prepare_engine(self) -> None:
        backend = self.backend
        if backend is None or backend.engines is None:
            self.notify("This backend's runtimes are deployed Workers.", severity="warning")
            return
        binding = self.runtimes_table.selected_binding
        runtime = next((item for item in self.runtimes if item.binding == binding), None)
        if runtime is None:
            self.show_tab(RUNTIMES_TAB)
            self.notify("Select a runtime in the Runtimes tab first.", severity="warning")
            return
        self.prepare_engine(backend, runtime.language)

    def action_create_sandbox(self) -> None:
        def created(sandbox_id: str | None) -> None:
            if sandbox_id is None:
                return
            self.highlighted_sandbox_id = sandbox_id

            async def create(backend: Backend) -> None:
                info = await backend.sandbox(sandbox_id).get_info()
                self.post_message(SandboxesLoaded(await backend.list_sandboxes()))
                self.post_message(SandboxInfoLoaded(info))

            self.call_backend(f"Creating {sandbox_id} failed", create)
            self.show_tab(INFO_TAB)

        self.push_screen(CreateSandboxScreen(), created)

    def action_destroy_sandbox(self) -> None:
        sandbox_id = self.selected_sandbox_id
        if sandbox_id is None:
            return

        def confirmed(yes: bool | None) -> None:
            if not yes:
                return

            async def destroy(backend: Backend) -> None:
                await backend.sandbox(sandbox_id).destroy()
                self.post_message(SandboxDestroyed(sandbox_id))
                self.post_message(SandboxesLoaded(await backend.list_sandboxes()))

            self.call_backend(f"Destroying {sandbox_id} failed", destroy)

        question = (
            f"Destroy sandbox {sandbox_id}?\nIts files, env vars, contexts and history are deleted."
        )
        self.push_screen(ConfirmScreen(question, "Destroy"), confirmed)

    @on(SandboxDestroyed)
    @while_open
    async def sandbox_destroyed(self, message: SandboxDestroyed) -> None:
        for pane in list(self.tabs.query(ReplPane)):
            if pane.sandbox_id == message.sandbox_id:
                await self.tabs.remove_pane(repl_tab_id(pane.context.id))
        self.sandbox_infos.pop(message.sandbox_id, None)
        if self.highlighted_sandbox_id == message.sandbox_id:
            self.highlighted_sandbox_id = None
        info = self.info_panel.info
        if info is not None and info.id == message.sandbox_id:
            self.info_panel.info = None
        self.notify(f"Destroyed {message.sandbox_id}", title="Sandbox")
        self.refresh_bindings()

    def action_edit_env_vars(self) -> None:
        sandbox_id = self.selected_sandbox_id
        if sandbox_id is None:
            return
        info = self.sandbox_infos.get(sandbox_id)
        if info is None:
            self.load_sandbox_info(sandbox_id)
            self.notify("Loading the sandbox; try again in a moment.", severity="warning")
            return

        def edited(update: dict[str, str | None] | None) -> None:
            if not update:
                return

            async def save(backend: Backend) -> None:
                sandbox = backend.sandbox(sandbox_id)
                await sandbox.set_env_vars(update)
                self.post_message(SandboxInfoLoaded(await sandbox.get_info()))

            self.call_backend("Saving env vars failed", save)

        self.push_screen(EnvVarsScreen(sandbox_id, dict(info.env_vars)), edited)

    def action_toggle_env_reveal(self) -> None:
        self.info_panel.reveal_env = not self.info_panel.reveal_env
        self.show_tab(INFO_TAB)

    def action_create_context(self) -> None:
        sandbox_id = self.selected_sandbox_id
        if sandbox_id is None:
            return
        if not self.runtimes:
            self.notify("No runtimes loaded yet.", severity="warning")
            return

        def chosen(request: ContextRequest | None) -> None:
            if request is not None:
                self.create_context(sandbox_id, request)

        self.push_screen(CreateContextScreen(sandbox_id, self.runtimes), chosen)

    def action_delete_context(self) -> None:
        self.confirm_context_change(recreate=False)

    def action_reset_context(self) -> None:
        self.confirm_context_change(recreate=True)

    def confirm_context_change(self, *, recreate: bool) -> None:
        repl = self.active_repl
        if repl is None:
            return
        sandbox_id, context = repl.sandbox_id, repl.context

        def confirmed(yes: bool | None) -> None:
            if not yes:
                return

            async def change(backend: Backend) -> None:
                interpreter = backend.sandbox(sandbox_id).interpreter
                await interpreter.delete_code_context(context.id)
                self.post_message(ContextRemoved(sandbox_id, context.id))
                if recreate:
                    fresh = await interpreter.create_code_context(context.binding, context.cwd)
                    self.post_message(ContextOpened(sandbox_id, fresh, []))

            self.call_backend("Changing the context failed", change)

        verb = "Reset" if recreate else "Delete"
        question = f"{verb} context {context.binding} {short_id(context.id)}?\n" + (
            "It is deleted and created again: its REPL state is lost."
            if recreate
            else "Its REPL state and history are deleted."
        )
        self.push_screen(ConfirmScreen(question, verb), confirmed)

    def action_run_cell(self) -> None:
        repl = self.active_repl
        if repl is None or repl.running or self.backend is None:
            return
        code = repl.code_input.text
        if not code.strip():
            return
        self.run_worker(
            self.run_cell_request(self.backend, repl.sandbox_id, repl.context.id, code),
            group=f"run-{repl.context.id}",
            description=f"Running a cell in {repl.context.id}",
            exit_on_error=False,
        )
        repl.pending_code = code
        repl.code_input.text = ""
        repl.run_status.start("running")

    def action_cancel_run(self) -> None:
        repl = self.active_repl
        if repl is None or not repl.running or self.backend is None:
            return
        repl.run_status.start("cancelling")
        self.cancel_cell(self.backend, repl.sandbox_id, repl.context.id)

    def action_search_history(self) -> None:
        repl = self.active_repl
        if repl is None:
            return

        def chosen(code: str | None) -> None:
            if code is not None:
                repl.set_code(code)
                repl.code_input.focus()

        self.push_screen(HistorySearchScreen(repl.history), chosen)

    @on(CodeInput.HistoryStep)
    def history_step(self, message: CodeInput.HistoryStep) -> None:
        for repl in message.code_input.ancestors:
            if isinstance(repl, ReplPane):
                repl.step_history(message.step)
                return

    def action_find_in_transcript(self) -> None:
        repl = self.active_repl
        if repl is None:
            return
        find_input = repl.find_input
        find_input.toggle_class("-visible")
        if find_input.has_class("-visible"):
            find_input.focus()
        else:
            repl.code_input.focus()

    @on(Input.Submitted, "#find-input")
    def find_next(self, event: Input.Submitted) -> None:
        repl = self.active_repl
        if repl is None:
            return
        line = repl.transcript.find_next(event.value)
        if line is None:
            self.notify(f"{event.value!r} not found", severity="warning")
        else:
            cell = repl.transcript.current_cell
            where = f"cell [{cell.number}]" if cell is not None else f"line {line + 1}"
            self.notify(f"{event.value!r} found in {where}", timeout=2)

    def action_copy_cell(self) -> None:
        self.copy_current_cell("cell")

    def action_copy_result(self) -> None:
        self.copy_current_cell("result")

    def copy_current_cell(self, part: CellPart) -> None:
        repl = self.active_repl
        cell = repl.transcript.current_cell if repl is not None else None
        if cell is None:
            self.notify("No cell to copy yet.", severity="warning")
            return
        self.copy_cell_part(cell, part)

    def action_pick_cell(self) -> None:
        repl = self.active_repl
        if repl is None:
            return
        if not repl.transcript.cells:
            self.notify("No cell to copy yet.", severity="warning")
            return

        def chosen(request: CellCopyRequest | None) -> None:
            if request is not None:
                self.copy_cell_part(request.cell, request.part)

        picker = CellPickerScreen(
            list(repl.transcript.cells),
            repl.transcript.current_cell_index,
            show_measurements=self.show_measurements,
        )
        self.push_screen(picker, chosen)

    def copy_cell_part(self, cell: TranscriptCell, part: CellPart) -> None:
        """Copy `part` of `cell` to the clipboard (OSC 52: works over SSH too)."""
        text = cell.part_text(part)
        if not text:
            self.notify(f"Cell [{cell.number}] has no {part}.", severity="warning")
            return
        self.copy_to_clipboard(text)
        what = f"cell [{cell.number}]" if part == "cell" else f"the {part} of cell [{cell.number}]"
        self.notify(f"Copied {what}", timeout=2)

    def action_export_markdown(self) -> None:
        self.export_active_transcript("markdown")

    def action_export_json(self) -> None:
        self.export_active_transcript("json")

    def export_active_transcript(self, file_format: str) -> None:
        """Ask for the file (default: under the data dir), then write it."""
        repl = self.active_repl
        if repl is None:
            return
        title = f"{repl.sandbox_id}-{repl.context.binding}-{short_id(repl.context.id)}"
        cells = list(repl.transcript.cells)
        default = default_export_path(self.data_dir, title, file_format, self.clock.now_ms())

        def chosen(path: Path | None) -> None:
            if path is not None:
                self.write_export(path, title, cells, file_format, overwrite=False)

        self.push_screen(ExportScreen(file_format, default), chosen)

    def write_export(
        self,
        path: Path,
        title: str,
        cells: list[TranscriptCell],
        file_format: str,
        *,
        overwrite: bool,
    ) -> None:
        """Write the export; an existing file is overwritten only once confirmed."""
        try:
            write_transcript(path, title, cells, file_format, overwrite=overwrite)
        except FileExistsError:

            def confirmed(yes: bool | None) -> None:
                if yes:
                    self.write_export(path, title, cells, file_format, overwrite=True)

            question = f"{path} already exists.\nOverwrite it with this transcript?"
            self.push_screen(ConfirmScreen(question, "Overwrite"), confirmed)
            return
        except OSError as error:
            self.notify(str(error), title="Export failed", severity="error", timeout=8)
            return
        self.notify(str(path), title="Transcript exported")

    async def action_close_tab(self) -> None:
        repl = self.active_repl
        if repl is not None:
            await self.tabs.remove_pane(repl_tab_id(repl.context.id))

    def action_pick_profile(self) -> None:
        def chosen(profile: str | None) -> None:
            if profile is not None and profile != self.profile:
                self.use_profile(profile)

        self.push_screen(ProfilePickerScreen(profile_names(self.config), self.profile), chosen)

    def action_toggle_remote(self) -> None:
        if self.profile != LOCAL:
            self.use_profile(LOCAL)
        elif self.config.last_remote is not None:
            self.use_profile(self.config.last_remote)

    def use_profile(self, profile: str) -> None:
        if profile != LOCAL and self.config.last_remote != profile:
            self.config.last_remote = profile
            self.save_config()
        self.switch_profile(profile)
        self.notify(f"Switched to profile {profile}", timeout=2)

    def remember_theme(self, theme: object) -> None:
        if self.config.theme != self.theme:
            self.config.theme = self.theme
            self.save_config()

    def save_config(self) -> None:
        try:
            self.config.save()
        except (OSError, ConfigError) as error:
            self.notify(str(error), title="Cannot save the config", severity="error")

    # ----------------------------------------------------------------- watching

    def action_watch_folder(self) -> None:
        sandbox_id = self.selected_sandbox_id
        if sandbox_id is None or self.backend is None:
            return
        if self.folder_watch is not None:
            self.notify(
                f"Already watching {self.folder_watch.folder}; stop it first.",
                title="Watch",
                severity="warning",
            )
            return
        repl = self.active_repl
        context = repl.context if repl is not None and repl.sandbox_id == sandbox_id else None

        def chosen(request: WatchRequest | None) -> None:
            if request is not None:
                self.start_watch(sandbox_id, context, request)

        self.push_screen(WatchScreen(sandbox_id, context), chosen)

    def start_watch(
        self, sandbox_id: str, context: CodeContext | None, request: WatchRequest
    ) -> None:
        """Watch `request.folder` into the sandbox in a worker (see `run_watch`)."""
        if self.backend is None:
            self.notify("The backend is not open yet.", severity="warning")
            return
        backend = self.backend
        try:
            # The same state file as `watch`: only what a sync created is ever deleted,
            # also in a later session.
            state_file = sync_state_file(
                self.data_dir,
                backend=f"{backend.name} {backend.description}",
                sandbox_id=sandbox_id,
                dest=request.dest,
                folder=request.folder,
            )
            sync = FolderSync(
                request.folder,
                backend.sandbox(sandbox_id),
                dest=request.dest,
                state_file=state_file,
            )
            runner = None
            if request.entry is not None and context is not None:
                runner = entry_runner_code(
                    context.language, remote_path(sync.dest, request.entry), sync.dest
                )
        except (OSError, ValueError) as error:
            self.notify(str(error), title="Cannot watch the folder", severity="error", timeout=8)
            return
        self.watch_count += 1
        watch = ActiveWatch(
            self.watch_count,
            sandbox_id,
            sync,
            asyncio.Event(),
            context.id if runner is not None and context is not None else None,
            request.entry if runner is not None else None,
            runner,
        )
        self.folder_watch = watch
        self.status.watch_target = f"{sync.root.name or sync.root} → {sandbox_id}:{sync.dest}"
        self.status.watch_state = "starting"
        self.status.watch_last_sync = ""
        self.status.watch_errors = 0
        self.status.watch_conflicts = 0
        self.refresh_bindings()
        self.run_watch(backend, watch)

    @work(group="watch", exit_on_error=False)
    async def run_watch(self, backend: Backend, watch: ActiveWatch) -> None:
        """Worker body: the sync's events and passes come back as messages; with an
        entry, each pass that changed the sandbox runs it like a REPL cell."""
        watch_id = watch.watch_id

        def report_event(event: SyncEvent) -> None:
            self.post_message(WatchEventReceived(watch_id, event))

        unsubscribe = watch.sync.subscribe(report_event)
        poll = self.set_interval(WATCH_POLL_SECONDS, partial(self.poll_watch, watch))

        async def after_sync(report: SyncReport) -> None:
            self.post_message(WatchSynced(watch_id, watch.sandbox_id, watch.sync.dest, report))
            if watch.runner is None or watch.context_id is None or not report.changed:
                return
            if watch.stop.is_set():
                return
            self.post_message(WatchRunStarted(watch_id, watch.context_id, watch.runner))
            await self.run_cell_request(
                backend,
                watch.sandbox_id,
                watch.context_id,
                watch.runner,
                label=f"watch run: {watch.entry}",
            )

        failure: str | None = None
        try:
            await watch.sync.watch(stop=watch.stop, after_sync=after_sync)
        except Exception as error:
            failure = describe_error(error)
        finally:
            poll.stop()
            unsubscribe()
        self.post_message(WatchEnded(watch_id, failure))

    def poll_watch(self, watch: ActiveWatch) -> None:
        """Notice a vanished folder (the watcher itself reports nothing for it)."""
        if self.folder_watch is not watch or not self.tabs.is_attached:
            return
        if not watch.folder.is_dir():
            self.notify(
                f"{watch.folder} is gone; stopped watching.",
                title="Watch",
                severity="error",
                timeout=8,
            )
            self.stop_watch(None)

    def action_unwatch(self) -> None:
        if self.folder_watch is not None:
            self.stop_watch("stopped")

    def stop_watch(self, note: str | None) -> None:
        """Ask the watch worker to end (it finishes the current pass first)."""
        watch, self.folder_watch = self.folder_watch, None
        if watch is None:
            return
        watch.stop.set()
        self.clear_watch_status()
        self.refresh_bindings()
        if note:
            self.notify(f"{watch.folder} → {watch.sandbox_id}: {note}", title="Watch", timeout=3)

    def clear_watch_status(self) -> None:
        self.status.watch_target = ""
        self.status.watch_state = ""
        self.status.watch_last_sync = ""
        self.status.watch_errors = 0
        self.status.watch_conflicts = 0

    def current_watch(self, watch_id: int) -> ActiveWatch | None:
        watch = self.folder_watch
        return watch if watch is not None and watch.watch_id == watch_id else None

    @on(WatchEventReceived)
    @while_open
    def watch_event(self, message: WatchEventReceived) -> None:
        if self.current_watch(message.watch_id) is None:
            return
        event = message.event
        if event.kind is EventKind.WATCHING:
            self.status.watch_state = "watching"
        elif event.kind is EventKind.SYNCING:
            self.status.watch_state = "syncing"
        elif event.kind is EventKind.RETRYING:
            self.status.watch_state = "retrying"
            self.notify(event.message, title="Watch", severity="warning", timeout=6)
        elif event.kind is EventKind.NOTICE:
            self.notify(event.message, title="Watch", severity="warning", timeout=6)
        elif event.kind is EventKind.CONFLICT:
            self.status.watch_conflicts += 1
            self.notify(event.message, title="Watch conflict", severity="warning", timeout=6)
        elif event.kind is EventKind.SYNCED and event.report is not None:
            report = event.report
            self.status.watch_state = "watching"
            stamp = time.strftime("%H:%M:%S", time.localtime(event.at))
            self.status.watch_last_sync = f"{stamp} ({report.summary()})"
            self.status.watch_errors += len(report.errors)
            if report.errors:
                self.notify(
                    issues_text([f"{issue.path}: {issue.message}" for issue in report.errors]),
                    title=f"Watch: {len(report.errors)} paths not synced",
                    severity="error",
                    timeout=8,
                )
        # ERROR events are per path; they are summed up with the pass's report.

    @on(WatchSynced)
    @while_open
    def watch_synced(self, message: WatchSynced) -> None:
        if not message.report.changed:
            return
        directory = message.dest
        if not self.sandbox_tree.is_directory_expanded(message.sandbox_id, directory):
            directory = WORKSPACE
        if self.sandbox_tree.is_directory_expanded(message.sandbox_id, directory):
            self.list_directory(message.sandbox_id, directory)

    @on(WatchRunStarted)
    @while_open
    def watch_run_started(self, message: WatchRunStarted) -> None:
        pane = self.repl_for(message.context_id)
        if pane is None or pane.running:
            return
        pane.pending_code = message.code
        pane.run_status.start("watch run")

    @on(WatchEnded)
    @while_open
    def watch_ended(self, message: WatchEnded) -> None:
        if self.current_watch(message.watch_id) is not None:
            self.folder_watch = None
            self.clear_watch_status()
            self.refresh_bindings()
        if message.failure is not None:
            self.notify(message.failure, title="Watching stopped", severity="error", timeout=8)

    # ----------------------------------------------------------------- palette

    def inapplicable_palette_actions(self) -> set[str]:
        """Actions the keys allow but the palette leaves out now (the keys stay bound
        so the footer does not change, and need no re-render, at every run)."""
        repl = self.active_repl
        if repl is None:
            return {"quit"}
        return {"quit", "run_cell"} if repl.running else {"quit", "cancel_run"}

    def palette_commands(self) -> list[PaletteCommand]:
        """Every binding's action that applies now, plus per-item commands."""
        commands: list[PaletteCommand] = []
        for binding in WORKBENCH_BINDINGS:
            if binding.action in self.inapplicable_palette_actions():
                continue
            if self.check_action(binding.action, ()):
                keys = self.get_key_display(binding)
                commands.append(
                    PaletteCommand(
                        PALETTE_TITLES.get(binding.action, binding.description),
                        f"{keys} · {binding.id}",
                        partial(self.run_action, binding.action),
                    )
                )
        for name in profile_names(self.config):
            if name != self.profile:
                commands.append(
                    PaletteCommand(
                        f"Switch to profile {name}",
                        "Work against this backend",
                        partial(self.use_profile, name),
                    )
                )
        sandbox_id = self.selected_sandbox_id
        info = self.sandbox_infos.get(sandbox_id) if sandbox_id is not None else None
        if info is not None:
            for context in info.contexts:
                commands.append(
                    PaletteCommand(
                        f"Open context {context.binding} {short_id(context.id)}",
                        f"{info.id} · {context.cwd} · {context.executions} runs",
                        partial(self.open_context, info.id, context_from_info(context)),
                    )
                )
        return commands


def run_app(profile: str = LOCAL, data_dir: Path | None = None) -> None:
    WorkbenchApp(profile, data_dir).run()
