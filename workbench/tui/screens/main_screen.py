"""The workbench's main screen: the sidebar tree, the tabs (sandbox info, runtimes, a REPL
per open context) and the status bar.

API calls run in workers (`ProfileConnection`, `FolderWatch`, `WorkspaceFiles`) that post
messages; the handlers here (and those of the watch, rerun, workspace-editing, inspector
and checkpoint features, inherited from `FolderWatchHandlers`, `CellRerunHandlers`,
`WorkspaceFileHandlers` and `ContextStateHandlers`) are what changes the widgets.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import TabbedContent, TabPane, Tree

from workbench.api import (
    Backend,
    CheckpointUsage,
    Clock,
    CodeContext,
    EngineInfo,
    ExecutionResult,
    RuntimeInfo,
    SandboxInfo,
    VersionReport,
    iso_from_ms,
    short_id,
)
from workbench.api.costs import ESTIMATE_NOTE, CostTotal, dollars_text
from workbench.api.display import counted, describe_backend, human_bytes
from workbench.config import Prices
from workbench.tui.cell_rerun import CellRerunHandlers
from workbench.tui.context_state import ContextStateHandlers
from workbench.tui.folder_watch import FolderWatch, FolderWatchHandlers
from workbench.tui.history_store import (
    OPEN_FILES_FILE_NAME,
    TREE_FILE_NAME,
    ExpandedTree,
    LocalHistoryStore,
    OpenFiles,
    OpenTabs,
)
from workbench.tui.messages import (
    BackendFailed,
    BackendOpened,
    CellFinished,
    CellOutput,
    CellWaiting,
    ContextGone,
    ContextOpened,
    ContextRemoved,
    ContextsGone,
    DaemonNoted,
    DaemonReplaced,
    DirectoryListed,
    EnginePrepared,
    EngineProgress,
    EngineStatesLoaded,
    EnvVarsSaved,
    HealthChecked,
    HistoryCaughtUp,
    OperationFailed,
    RunAbandoned,
    RuntimesLoaded,
    SandboxDestroyed,
    SandboxDestroyWaits,
    SandboxesLoaded,
    SandboxInfoFailed,
    SandboxInfoLoaded,
    SandboxUsageLoaded,
    TokenRefused,
)
from workbench.tui.profile_connection import BackendFactory, ProfileConnection, connection_detail
from workbench.tui.screens.confirm_screen import ConfirmScreen
from workbench.tui.screens.create_context_screen import CreateContextScreen
from workbench.tui.screens.create_sandbox_screen import CreateSandboxScreen
from workbench.tui.screens.env_vars_screen import EnvVarsScreen
from workbench.tui.tree_nodes import (
    ContextNode,
    DirectoryNode,
    FileNode,
    SandboxNode,
    TreeNodeData,
    context_from_info,
)
from workbench.tui.untrusted import cut, shown_content
from workbench.tui.widgets.info_panel import InfoPanel
from workbench.tui.widgets.repl_pane import ABANDONED_NOTE, GIVEN_UP_NOTE, ReplPane
from workbench.tui.widgets.runtimes_table import RuntimesTable
from workbench.tui.widgets.sandbox_tree import SandboxTree
from workbench.tui.widgets.status_bar import StatusBar
from workbench.tui.widgets.workbench_footer import WorkbenchFooter
from workbench.tui.widgets.workbench_tabs import (
    INFO_TAB,
    RUNTIMES_TAB,
    WorkbenchTabs,
    repl_tab_id,
)
from workbench.tui.worker_reports import on_report
from workbench.tui.workspace_files import WorkspaceFileHandlers, WorkspaceFiles


class MainScreen(
    FolderWatchHandlers, CellRerunHandlers, WorkspaceFileHandlers, ContextStateHandlers
):
    """One profile at a time: its sandboxes, runtimes and open contexts. The app's global
    bindings call the `action_*` methods here (and the active REPL's)."""

    def __init__(
        self,
        profile: str,
        *,
        backend_factory: BackendFactory,
        data_dir: Path,
        history_store: LocalHistoryStore,
        open_tabs: OpenTabs,
        clock: Clock,
        show_measurements: bool,
        health_interval: float,
        prices: Prices | None = None,
    ) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.clock = clock
        self.show_measurements = show_measurements
        self.prices = prices
        """What the cost estimates charge (None: no estimates; and none without
        measurements, which vary from run to run)."""
        self.health_interval = health_interval
        self.connection = ProfileConnection(self, backend_factory, history_store, profile)
        self.connection.prices = prices if show_measurements else None
        self.open_tabs = open_tabs
        self.expanded_tree = ExpandedTree(data_dir / TREE_FILE_NAME)
        self.open_files = OpenFiles(data_dir / OPEN_FILES_FILE_NAME)
        self.listing_shown = 0
        """The number of the listing the tree shows (`SandboxesLoaded.number`)."""
        self.tabs_reopened = False
        """Whether the current profile's tabs of the last session were reopened (and its
        tree expanded as it was)."""
        self.runtimes: list[RuntimeInfo] = []
        self.engine_states: dict[str, EngineInfo] = {}
        self.engine_progress_labels: dict[str, str] = {}
        self.version_warnings_shown: set[str] = set()
        """The version mismatches notified for the current profile."""
        self.sandbox_infos: dict[str, SandboxInfo] = {}
        self.stale_infos: set[str] = set()
        """Sandboxes a run changed since their info was last loaded."""
        self.highlighted_sandbox_id: str | None = None
        self.last_context_binding: str | None = None
        """The binding of the last context created here (proposed for the next one)."""
        self.checkpoints_to_delete: set[str] = set()
        """Contexts whose checkpoints are being listed to pick one to delete."""
        self.sandbox_tree = SandboxTree(id="sidebar")
        self.tabs = WorkbenchTabs(id="tabs", initial=INFO_TAB)
        self.folder_watch = FolderWatch(self, self.connection, data_dir, self.tabs.language_of)
        self.workspace_files = WorkspaceFiles(self, self.connection)
        self.info_panel = InfoPanel(self.clock.now_ms, id="info")
        self.runtimes_table = RuntimesTable(id="runtimes")
        self.status = StatusBar(id="status")

    def compose(self) -> ComposeResult:
        with Horizontal(id="body"):
            yield self.sandbox_tree
            with self.tabs:
                with TabPane("Sandbox", id=INFO_TAB):
                    yield self.info_panel
                with TabPane("Runtimes", id=RUNTIMES_TAB):
                    yield self.runtimes_table
        yield self.status
        yield WorkbenchFooter()

    def on_mount(self) -> None:
        self.set_interval(self.health_interval, self.connection.check_health)
        self.switch_profile(self.connection.profile)

    def keep_drafts(self) -> None:
        """Keep the code typed and not run in the open tabs, for their reopening, and what
        the tree shows expanded (at quit: at unmount the tabs are gone already)."""
        drafts = {repl.context.id: repl.code_input.text for repl in self.tabs.repls}
        self.open_tabs.keep_drafts(self.connection.profile, drafts)
        self.keep_tree()

    def keep_tree(self) -> None:
        """Keep what the profile's tree shows expanded, once it showed its sandboxes (a
        profile that never answered leaves what was kept before)."""
        if self.tabs_reopened:
            self.expanded_tree.keep(self.connection.profile, self.sandbox_tree.expanded_sandboxes())

    async def close(self) -> None:
        """End the watch and close the backend (at app exit)."""
        self.folder_watch.stop()
        await self.connection.close()

    @property
    def profile(self) -> str:
        return self.connection.profile

    @property
    def backend(self) -> Backend | None:
        return self.connection.backend

    @property
    def active_repl(self) -> ReplPane | None:
        return self.tabs.active_repl

    @property
    def selected_sandbox_id(self) -> str | None:
        """The sandbox its keys (f3, f4, f6, f8) and the palette's commands act on: the
        tree cursor's while the tree has the focus (it keeps it under the palette), else
        the active REPL's or file's, else the tree cursor's."""
        if self.focused is self.sandbox_tree:
            return self.highlighted_sandbox_id
        tab = self.active_repl or self.tabs.active_file
        return tab.sandbox_id if tab is not None else self.highlighted_sandbox_id

    def show_tab(self, tab_id: str) -> None:
        """Activate the sandbox or the runtimes tab; focus goes to what drives it."""
        target = self.runtimes_table if tab_id == RUNTIMES_TAB else self.sandbox_tree
        self.tabs.activate(tab_id, target)

    def switch_tab(self, step: int) -> None:
        """Show the tab `step` places after the active one (wrapping around); focus goes
        to a REPL's or a file's editor, or to what drives a fixed tab."""
        tab_ids = self.tabs.tab_ids()
        if not tab_ids:
            return
        current = tab_ids.index(self.tabs.active) if self.tabs.active in tab_ids else 0
        target = tab_ids[(current + step) % len(tab_ids)]
        if target in (INFO_TAB, RUNTIMES_TAB):
            self.show_tab(target)
            (self.runtimes_table if target == RUNTIMES_TAB else self.sandbox_tree).focus()
            return
        self.tabs.activate(target)
        repl, file_view = self.tabs.active_repl, self.tabs.active_file
        if repl is not None:
            repl.code_input.focus()
        elif file_view is not None:
            file_view.focus_content()

    # ----------------------------------------------------------------- backend

    def switch_profile(self, profile: str) -> None:
        """Drop everything of the current backend and open `profile`'s."""
        self.connection.cancel_requests()
        drafts = {repl.context.id: repl.code_input.text for repl in self.tabs.repls}
        self.open_tabs.keep_drafts(self.connection.profile, drafts)  # for coming back
        for pane in self.tabs.repls:
            self.tabs.close_repl(pane.context.id)
        for view in self.tabs.file_views_of_all():
            self.tabs.close_file(view)  # they read and save through the old backend
        if self.folder_watch.active is not None:
            self.stop_watch("the profile changed")
        self.keep_tree()
        self.sandbox_infos.clear()
        self.highlighted_sandbox_id = None
        self.info_panel.info = None
        self.sandbox_tree.show_profile(profile)
        self.status.profile = profile
        self.status.state = "connecting"
        self.status.detail = ""
        self.status.versions = ""
        self.status.version_warning = ""
        self.version_warnings_shown.clear()
        self.tabs_reopened = False
        self.connection.open(profile)

    @on_report(BackendOpened)
    async def backend_opened(self, message: BackendOpened) -> None:
        if not await self.connection.adopt(message.profile, message.backend):
            return
        self.app.refresh_bindings()  # the backend's actions (new sandbox, refresh) apply now
        self.status.detail = connection_detail(message.backend)
        self.connection.check_health()
        self.connection.load_runtimes()
        self.connection.load_sandboxes()

    @on_report(BackendFailed)
    async def backend_failed(self, message: BackendFailed) -> None:
        if message.profile != self.connection.profile:
            return  # a profile switched away from: its failure says nothing of this one
        await self.connection.drop_backend()
        self.status.state = "unreachable"
        self.status.detail = message.reason
        self.notify(
            message.reason, title=f"Cannot open profile {message.profile}", severity="error"
        )
        self.app.refresh_bindings()  # F5 opens it again

    @on_report(HealthChecked)
    def health_checked(self, message: HealthChecked) -> None:
        if message.profile != self.profile:
            return
        refused = self.connection.refused
        if message.healthy and refused is not None:  # a health check needs no token
            self.token_refused(TokenRefused(message.profile, refused))
            return
        self.status.state = "connected" if message.healthy else "unreachable"
        self.status.detail = message.detail
        if message.healthy:
            self.show_versions(self.connection.versions)

    @on_report(TokenRefused)
    def token_refused(self, message: TokenRefused) -> None:
        """Every request but the health check fails: the bar said "connected" (QA)."""
        if message.profile == self.profile:
            self.status.state = "token refused"
            self.status.detail = message.reason

    @on_report(DaemonReplaced)
    def daemon_replaced(self, message: DaemonReplaced) -> None:
        """Another local daemon answers: what it offers (languages, engines) is read again
        (the health check that found it updates the status bar)."""
        if message.profile != self.profile:
            return
        self.notify(
            message.note,
            title="Local daemon restarted",
            severity="warning" if message.warning else "information",
            timeout=15,
        )
        self.connection.load_runtimes()

    @on_report(DaemonNoted)
    def daemon_noted(self, message: DaemonNoted) -> None:
        self.notify(
            message.note.removeprefix("note: "),
            title="Local daemon restarted",
            severity="warning",
            timeout=15,
        )

    def show_versions(self, versions: VersionReport) -> None:
        """The backend's versions in the status bar and the Runtimes tab; a runtime its
        core cannot talk to is a warning there and, once per profile, a notification."""
        protocol = versions.interpreter_protocol
        self.status.versions = f"{versions.core} · protocol {protocol}" if versions.core else ""
        self.status.version_warning = ", ".join(
            f"{runtime.binding} speaks protocol {runtime.protocol}"
            for runtime in versions.mismatched
        )
        self.runtimes_table.show_expected_protocol(protocol)
        for warning in versions.warnings:
            if warning not in self.version_warnings_shown:
                self.version_warnings_shown.add(warning)
                self.notify(warning, title="Runtime version mismatch", severity="warning")

    @on_report(OperationFailed)
    def operation_failed(self, message: OperationFailed) -> None:
        self.notify(message.reason, title=message.title, severity="error", timeout=8)

    # ----------------------------------------------------------------- loading

    @on_report(SandboxesLoaded)
    def sandboxes_loaded(self, message: SandboxesLoaded) -> None:
        if message.backend is not self.connection.backend:
            return  # the profile switched since
        if message.number < self.listing_shown:  # a later listing is shown already
            if message.refresh:  # what else the refresh reads, of the sandboxes shown
                self.refresh_listed(self.sandbox_tree.sandbox_ids())
            return
        self.listing_shown = message.number
        self.sandbox_tree.show_sandboxes(message.sandboxes)
        known = {summary.id for summary in message.sandboxes}
        if not self.tabs_reopened:
            self.tabs_reopened = True
            self.reopen_tabs(known)
            # Read below, as every expanded sandbox's info is.
            self.sandbox_tree.restore_expanded(self.expanded_tree.expanded(self.connection.profile))
        for sandbox_id in list(self.sandbox_infos):
            if sandbox_id not in known:
                del self.sandbox_infos[sandbox_id]
        self.stale_infos &= known  # a gone one's info is not read again
        shown = self.info_panel.info
        if shown is not None and shown.id not in known:  # as when this workbench destroys it
            self.info_panel.info = None
        if self.highlighted_sandbox_id not in known:
            # The tree moved its cursor to another sandbox, which it says (`NodeHighlighted`).
            self.highlighted_sandbox_id = None
            self.app.refresh_bindings()
        for pane in self.tabs.repls:
            if pane.sandbox_id not in known and not pane.gone:
                self.mark_tab_gone(pane)
        for view in self.tabs.file_views_of_all():
            if view.sandbox_id not in known and not view.sandbox_gone:
                view.show_sandbox_gone()
        # The expanded ones, not a lookup per listed sandbox: a gateway listing 20,000
        # blocked the workbench for 30 s (a lookup walks every node; a helper).
        for sandbox_id in self.sandbox_tree.expanded_sandbox_ids():
            self.connection.load_sandbox_info(sandbox_id, check_listed=False)
        if message.refresh:
            self.refresh_listed(known)

    def reopen_tabs(self, sandbox_ids: set[str]) -> None:
        """Reopen the REPL and file tabs the profile had open last time, of sandboxes that
        still exist (a context or a file that went meanwhile is forgotten); the files
        open behind the active tab."""
        profile = self.connection.profile
        for sandbox_id, context in self.open_tabs.tabs(profile):
            if sandbox_id in sandbox_ids:
                self.connection.reopen_context(sandbox_id, context)
            else:
                self.open_tabs.closed(profile, context.id)
        for place, (sandbox_id, path) in enumerate(self.open_files.files(profile)):
            if sandbox_id in sandbox_ids:
                self.workspace_files.open(sandbox_id, path, check_listed=False, reopened=place)
            else:
                self.open_files.closed(profile, sandbox_id, path)

    @on_report(RuntimesLoaded)
    def runtimes_loaded(self, message: RuntimesLoaded) -> None:
        self.runtimes = message.runtimes
        self.runtimes_table.show_runtimes(message.runtimes, self.engine_states)

    @on_report(EngineStatesLoaded)
    def engine_states_loaded(self, message: EngineStatesLoaded) -> None:
        self.engine_states = {engine.language: engine for engine in message.engines}

    @on_report(EngineProgress)
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

    @on_report(EnginePrepared)
    def engine_prepared(self, message: EnginePrepared) -> None:
        self.engine_progress_labels.pop(message.language, None)
        if message.error is not None:
            self.notify(message.error, title="Engine not prepared", severity="error")
        else:
            self.notify(f"The {message.language} engine is ready.", title="Engine prepared")
        self.connection.load_runtimes()

    @on_report(SandboxUsageLoaded)
    def sandbox_usage_loaded(self, message: SandboxUsageLoaded) -> None:
        panel = self.info_panel
        panel.checkpoints.pop(message.sandbox_id, None)
        panel.costs.pop(message.sandbox_id, None)
        if message.checkpoints is not None:
            panel.checkpoints[message.sandbox_id] = checkpoints_line(message.checkpoints)
        if message.cost is not None and self.prices is not None:
            panel.costs[message.sandbox_id] = cost_line(message.cost, self.prices)
        panel.refresh(layout=True)

    @on_report(EnvVarsSaved)
    def env_vars_saved(self, message: EnvVarsSaved) -> None:
        """Saving env vars changes nothing on screen but the panel: say it was done."""
        changes = [
            text
            for count, text in (
                (message.set, f"{counted(message.set, 'variable')} set"),
                (message.unset, f"{message.unset} unset"),
            )
            if count
        ]
        self.notify(
            f"{message.sandbox_id}: {', '.join(changes) or 'nothing changed'}",
            title="Env vars saved",
            timeout=3,
        )

    @on_report(SandboxInfoFailed)
    def sandbox_info_failed(self, message: SandboxInfoFailed) -> None:
        self.sandbox_tree.show_info_failed(message.sandbox_id)

    @on_report(SandboxInfoLoaded)
    def sandbox_info_loaded(self, message: SandboxInfoLoaded) -> None:
        info = message.info
        self.stale_infos.discard(info.id)
        if message.created:
            self.highlighted_sandbox_id = info.id
            self.app.refresh_bindings()
        self.show_sandbox_info(info)
        listed = {context.id for context in info.contexts}
        unlisted = [
            pane.context.id
            for pane in self.tabs.repls
            if pane.sandbox_id == info.id and not pane.gone and pane.context.id not in listed
        ]
        if unlisted:
            self.connection.confirm_contexts_gone(info.id, unlisted)

    @on_report(ContextsGone)
    def contexts_gone(self, message: ContextsGone) -> None:
        for context_id in message.context_ids:
            pane = self.tabs.repl_for(context_id)
            if pane is not None and not pane.gone:
                self.mark_tab_gone(pane)

    def show_sandbox_info(self, info: SandboxInfo) -> None:
        first_load = info.id not in self.sandbox_infos
        self.sandbox_infos[info.id] = info
        expanded = self.sandbox_tree.show_sandbox_info(info)
        if expanded:  # as the last session had it
            self.workspace_files.list_again(info.id, expanded)
        shown = self.info_panel.info
        if self.selected_sandbox_id == info.id or shown is None or shown.id == info.id:
            self.info_panel.info = info  # a newer read of the sandbox shown replaces it
        node = self.sandbox_tree.sandbox_node(info.id)
        tree_elsewhere = self.sandbox_tree.selected_sandbox_id != info.id
        if node is not None and info.id == self.highlighted_sandbox_id and tree_elsewhere:
            self.sandbox_tree.move_cursor(node)
        if first_load:
            self.app.refresh_bindings()

    @on_report(DirectoryListed)
    def directory_listed(self, message: DirectoryListed) -> None:
        expanded = self.sandbox_tree.show_directory(message.sandbox_id, message.path, message.files)
        if expanded:  # as the last session had it
            self.workspace_files.list_again(message.sandbox_id, expanded)

    # ----------------------------------------------------------------- tree and tabs

    @on(Tree.NodeExpanded, "#sidebar")
    def node_expanded(self, event: Tree.NodeExpanded[TreeNodeData]) -> None:
        """The user expanded a sandbox (its info is read) or a folder (it is listed); the
        tree's own expansions show what was just read, or what its caller lists."""
        data = event.node.data
        if not self.sandbox_tree.expanded_by_user(event.node):
            return
        if isinstance(data, SandboxNode):
            self.connection.load_sandbox_info(data.sandbox_id)
        elif isinstance(data, DirectoryNode):
            self.connection.list_directory(data.sandbox_id, data.path)

    @on(Tree.NodeHighlighted, "#sidebar")
    def node_highlighted(self, event: Tree.NodeHighlighted[TreeNodeData]) -> None:
        """The sandbox of the tree's cursor becomes the highlighted one: its cached info is
        shown, and its keys act on it. On the profile's root, none is (F8 there destroyed
        the sandbox the cursor had left, whose info stayed shown)."""
        sandbox_id = self.sandbox_tree.selected_sandbox_id
        if sandbox_id == self.highlighted_sandbox_id:
            return
        self.highlighted_sandbox_id = sandbox_id
        if sandbox_id is None:
            self.info_panel.info = None
            self.app.refresh_bindings()
            return
        cached = self.sandbox_infos.get(sandbox_id)
        if cached is not None:
            self.info_panel.info = cached
            self.reload_if_stale(sandbox_id)
        self.app.refresh_bindings()

    @on(Tree.NodeSelected, "#sidebar")
    def node_selected(self, event: Tree.NodeSelected[TreeNodeData]) -> None:
        data = event.node.data
        if isinstance(data, ContextNode):
            self.open_context(data.sandbox_id, context_from_info(data.context))
        elif isinstance(data, FileNode):
            self.workspace_files.open(data.sandbox_id, data.path, focus=True)
        elif isinstance(data, SandboxNode):
            self.highlighted_sandbox_id = data.sandbox_id
            self.tabs.activate(INFO_TAB, self.sandbox_tree)
            if not event.node.is_expanded:  # else this Enter expanded it: node_expanded reads
                self.connection.load_sandbox_info(data.sandbox_id)

    @on(TabbedContent.TabActivated)
    def tab_activated(self, event: TabbedContent.TabActivated) -> None:
        repl, file_view = self.active_repl, self.tabs.active_file
        if repl is not None:
            repl.focus_input()
        elif file_view is not None and self.app.focused is None:
            file_view.focus_content()  # the focus left the pane this tab replaced
        elif self.tabs.active == INFO_TAB:
            self.reload_if_stale(self.info_panel_sandbox)
        self.app.refresh_bindings()

    # ----------------------------------------------------------------- contexts

    def open_context(self, sandbox_id: str, context: CodeContext) -> None:
        if self.tabs.repl_for(context.id) is not None:
            self.tabs.activate(repl_tab_id(context.id))
            return
        self.connection.open_context(sandbox_id, context)

    def open_listed_context(self, sandbox_id: str, context_id: str) -> None:
        """Open a context of the sandbox's loaded info (the palette's *Open context*)."""
        info = self.sandbox_infos.get(sandbox_id)
        listed = [context for context in info.contexts if context.id == context_id] if info else []
        if listed:
            self.open_context(sandbox_id, context_from_info(listed[0]))

    @on_report(ContextOpened)
    async def context_opened(self, message: ContextOpened) -> None:
        open_already = self.tabs.repl_for(message.context.id)
        if open_already is not None:  # asked twice before its history came (a double Enter)
            self.tabs.activate(repl_tab_id(message.context.id))
            open_already.focus_input()
            return
        pane = ReplPane(
            message.sandbox_id,
            message.context,
            message.history,
            show_measurements=self.show_measurements,
            data_dir=self.data_dir,
            now_ms=self.clock.now_ms,
            prices=self.prices,
        )
        await self.tabs.add_repl(pane, beside=message.beside)
        # Now, not on TabActivated: the editor is painted before that message is handled,
        # and keys typed as soon as it shows would go to the widget that had the focus.
        pane.focus_input()
        pane.show_past(message.past, message.earlier)
        profile = self.connection.profile
        draft = self.open_tabs.take_draft(profile, message.context.id)  # typed before
        if draft and not pane.code_input.text:
            pane.set_code(draft)
        self.open_tabs.opened(profile, message.sandbox_id, message.context)

    @on_report(ContextRemoved)
    async def context_removed(self, message: ContextRemoved) -> None:
        self.open_tabs.closed(self.connection.profile, message.context_id)
        if self.tabs.repl_for(message.context_id) is not None:
            await self.tabs.close_repl(message.context_id)
        # Not of a sandbox gone too (a reopened tab's: the listing that found it gone came
        # first and took it from the tree), which the read would make again, empty (a flaky
        # test). A change: a read on its way may predate it.
        if self.sandbox_tree.sandbox_node(message.sandbox_id) is not None:
            self.connection.load_sandbox_info(message.sandbox_id, changed=True)

    def action_create_context(self) -> None:
        sandbox_id = self.selected_sandbox_id
        if sandbox_id is None:
            return
        if not self.runtimes:
            self.notify("No runtimes loaded yet.", severity="warning")
            return
        if not any(runtime.contexts for runtime in self.runtimes):
            # The dialog's binding list would be empty, which Textual's Select refuses
            # (EmptySelectError crashed the workbench on a gateway of stateless runtimes).
            bindings = ", ".join(runtime.binding for runtime in self.runtimes)
            self.notify(
                f"No runtime here offers code contexts: {bindings} run statelessly only.",
                severity="warning",
            )
            return
        backend = self.connection.backend_or_warn()
        if backend is None:
            return

        def created(context: CodeContext | None) -> None:
            """The dialog made the context (or was closed, maybe while it was made)."""
            if context is not None:
                self.last_context_binding = context.binding
                self.post_message(ContextOpened(sandbox_id, context, []))
            if context is not None or screen.creating:  # closed while creating: made or not
                self.connection.load_sandbox_info(sandbox_id, check_listed=context is None)

        create = partial(self.connection.create_context, backend, sandbox_id)
        screen = CreateContextScreen(sandbox_id, self.runtimes, create, self.proposed_binding())
        self.app.push_screen(screen, created)

    def proposed_binding(self) -> str | None:
        """The binding a new context most likely wants: the open REPL's, else the
        highlighted context's, else the one the last new context got."""
        repl = self.active_repl
        if repl is not None:
            return repl.context.binding
        node = self.sandbox_tree.cursor_node
        if node is not None and isinstance(node.data, ContextNode):
            return node.data.context.binding
        return self.last_context_binding

    async def action_close_tab(self) -> None:
        """Close the active REPL or file (with unsaved edits, a running cell or code typed
        and not run, once the user says so); a cell the REPL is running is given up,
        which cancels it."""
        file_view = self.tabs.active_file
        if file_view is not None:
            await self.close_file(file_view)
            return
        repl = self.active_repl
        if repl is None:
            return
        typed = bool(repl.code_input.text.strip())
        if not repl.running and not typed:
            await self.close_repl(repl)
            return

        def confirmed(yes: bool | None) -> None:
            if yes and repl.is_attached:
                self.call_later(self.close_repl, repl)

        losses = [
            *(["its running cell is cancelled"] if repl.running else []),
            *(["the code typed in it and not run is lost"] if typed else []),
        ]
        question = f"Close {repl.title}? {' and '.join(losses).capitalize()}."
        self.app.push_screen(ConfirmScreen(question, "Close"), confirmed)

    async def close_repl(self, repl: ReplPane) -> None:
        """Close the REPL's tab for good (not reopened); a cell it runs is given up."""
        self.connection.abandon_run(repl.context.id)
        self.open_tabs.closed(self.connection.profile, repl.context.id)
        await self.tabs.close_repl(repl.context.id)

    def action_fork_context(self) -> None:
        """A new context from a copy of the open REPL's state, opened beside it."""
        repl = self.active_live_repl()
        if repl is not None:
            self.connection.fork_context(repl.sandbox_id, repl.context)

    def show_sidebar(self, shown: bool) -> None:
        """Show or hide the sandbox tree; hidden, the tabs take its room (80 columns are
        tight for a REPL beside it), and the focus leaves it for the tabs."""
        tree = self.sandbox_tree
        if tree.display == shown:
            return
        had_focus = tree.has_focus
        tree.display = shown
        if not shown and had_focus:
            repl, file_view = self.tabs.active_repl, self.tabs.active_file
            if repl is not None:
                repl.code_input.focus()
            elif file_view is not None:
                file_view.focus_content()
            else:
                self.tabs.focus()

    def action_delete_context(self) -> None:
        self.confirm_context_change(recreate=False)

    def action_reset_context(self) -> None:
        self.confirm_context_change(recreate=True)

    def confirm_context_change(self, *, recreate: bool) -> None:
        repl = self.active_live_repl()
        if repl is None:
            return
        sandbox_id, context = repl.sandbox_id, repl.context

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.connection.change_context(sandbox_id, context, recreate=recreate)

        verb = "Reset" if recreate else "Delete"
        on = "" if self.backend is None else f" on {describe_backend(self.backend)}"
        question = f"{verb} context {context.binding} {short_id(context.id)}{on}?\n" + (
            "It is deleted and created again, with a new id: its REPL state, history and "
            "checkpoints are lost."
            if recreate
            else "Its REPL state, history and checkpoints are deleted."
        )
        self.app.push_screen(ConfirmScreen(question, verb), confirmed)

    # ----------------------------------------------------------------- running

    @on(ReplPane.RunRequested)
    def run_requested(self, message: ReplPane.RunRequested) -> None:
        message.stop()
        backend = self.backend
        if backend is not None:
            self.connection.run_cell(backend, message.sandbox_id, message.context, message.code)
            pane = self.tabs.repl_for(message.context.id)
            if pane is not None and not self.connection.streams_output:
                pane.note_output_at_end()

    @on(ReplPane.CatchUpRequested)
    def catch_up_requested(self, message: ReplPane.CatchUpRequested) -> None:
        """A tab asks for the runs another client made (after a jump, or on a refresh): read
        only while the sandbox exists (`ProfileConnection.catch_up`)."""
        message.stop()
        self.connection.catch_up(
            message.sandbox_id,
            message.context_id,
            message.after,
            message.before,
            message.generation,
        )

    @on_report(HistoryCaughtUp)
    def history_caught_up(self, message: HistoryCaughtUp) -> None:
        pane = self.tabs.repl_for(message.context_id)
        if pane is not None and pane.show_caught_up(message) and pane.inspector_shown:
            self.inspect(pane, check_listed=False)  # another client's runs changed the names

    @on(ReplPane.CancelRequested)
    def cancel_requested(self, message: ReplPane.CancelRequested) -> None:
        message.stop()
        backend = self.backend
        if message.give_up:
            self.give_up_run(message.context_id, message.generation)
        elif backend is not None:
            self.connection.cancel_cell(
                backend, message.sandbox_id, message.context_id, message.generation
            )

    def refresh_after_run(
        self, sandbox_id: str, context_id: str, result: ExecutionResult | None
    ) -> None:
        """What a run changed in the sandbox's info: its context's counters come with the
        result; the rest (files, the snapshot) is read again only when the info shows
        this sandbox, or else once it is shown next. The tree's expanded directories and
        the open files are read again."""
        self.refresh_workspace(sandbox_id)
        cached = self.sandbox_infos.get(sandbox_id)
        if cached is not None and result is not None and result.context is not None:
            now = iso_from_ms(self.clock.now_ms())
            self.show_sandbox_info(with_run(cached, context_id, result, now))
        if self.tabs.active == INFO_TAB and self.info_panel_sandbox == sandbox_id:
            self.connection.load_sandbox_info(sandbox_id, check_listed=False)
        else:
            self.stale_infos.add(sandbox_id)

    @property
    def info_panel_sandbox(self) -> str | None:
        info = self.info_panel.info
        return None if info is None else info.id

    def reload_if_stale(self, sandbox_id: str | None) -> None:
        """Read the info a run changed once the user shows it (listed first: the sandbox
        may have gone since)."""
        if sandbox_id is not None and sandbox_id in self.stale_infos:
            self.connection.load_sandbox_info(sandbox_id, changed=True)

    @on_report(CellWaiting)
    def cell_waiting(self, message: CellWaiting) -> None:
        pane = self.tabs.repl_for(message.context_id)
        if pane is not None and pane.running:
            pane.note_waiting(message.waits, self.run_ahead_of(pane))

    def run_ahead_of(self, pane: ReplPane) -> str | None:
        """The title of another tab running in the pane's sandbox (not waiting itself):
        what a run of the pane waits for, most likely."""
        return next(
            (
                other.title
                for other in self.tabs.repls
                if other is not pane
                and other.sandbox_id == pane.sandbox_id
                and other.running
                and not other.waiting
            ),
            None,
        )

    @on_report(CellOutput)
    def cell_output(self, message: CellOutput) -> None:
        pane = self.tabs.repl_for(message.context_id)
        if pane is not None and pane.running:
            pane.show_output(message.lines)

    @on_report(CellFinished)
    def cell_finished(self, message: CellFinished) -> None:
        pane = self.tabs.repl_for(message.context_id)
        if pane is None:
            return
        pane.finish_cell(message.code, message.result, message.failure, message.label)
        for other in self.tabs.repls:  # those that named this tab wait for another run now
            if other.sandbox_id == pane.sandbox_id and other.running and other.waiting:
                other.note_waiting(True, self.run_ahead_of(other))
        self.refresh_after_run(message.sandbox_id, message.context_id, message.result)
        if pane.inspector_shown:
            self.inspect(pane, check_listed=False)
        if message.label is None:
            self.connection.remember_input(message.sandbox_id, message.context_id, message.code)
        result = message.result
        if result is not None and result.session is not None:
            for note in result.session.notes[:3]:  # a gateway may send any number
                self.notify(
                    cut(note, 300),
                    title="REPL state",
                    severity="warning" if result.session.state_lost else "information",
                )

    @on_report(ContextGone)
    def context_gone(self, message: ContextGone) -> None:
        """The tab's context no longer exists: the tab says so and runs no more, it is not
        reopened next time, and the tree is listed again (a listing makes no sandbox; the
        info of a sandbox that is gone is not asked for, which would make it again)."""
        self.open_tabs.closed(self.connection.profile, message.context_id)
        self.stop_watch_into_gone_context(message.context_id)
        self.stale_infos.discard(message.sandbox_id)
        pane = self.tabs.repl_for(message.context_id)
        if pane is not None:
            pane.mark_gone(message.code, message.failure, message.label)
            tab = self.tabs.get_tab(repl_tab_id(message.context_id))
            tab.label = shown_content(f"{pane.title} (gone)")
        self.connection.load_sandboxes()

    def mark_tab_gone(self, pane: ReplPane) -> None:
        """A listing no longer has the tab's sandbox or context (another client destroyed
        or deleted it): the tab says so and runs no more, and it is not reopened next
        time."""
        self.open_tabs.closed(self.connection.profile, pane.context.id)
        pane.note_gone()
        tab = self.tabs.get_tab(repl_tab_id(pane.context.id))
        tab.label = shown_content(f"{pane.title} (gone)")

    @on_report(RunAbandoned)
    def run_abandoned(self, message: RunAbandoned) -> None:
        """The cancel interrupted nothing (the cell waits behind another run, or the
        gateway cannot interrupt), or its answer did not come in time: the cell's request
        is given up."""
        self.give_up_run(message.context_id, message.generation)

    def give_up_run(self, context_id: str, generation: int) -> None:
        """Drop the request of the pane's run `generation`, if it still runs (a cancel's
        late answer gave up the next cell: found in review)."""
        pane = self.tabs.repl_for(context_id)
        if pane is not None and (pane.generation != generation or not pane.running):
            return
        if pane is not None and pane.showing_watch_run:
            # Its request is the watch's own, which stopping the watch gives up.
            self.notify(
                "The watch's run of its entry did not stop: shift+F6 stops the watch and "
                "gives its run up.",
                title="Cancel",
                severity="warning",
            )
            return
        self.connection.abandon_run(context_id)
        if pane is not None:
            pane.abandon_run(GIVEN_UP_NOTE if self.connection.cancels_given_up else ABANDONED_NOTE)

    # ----------------------------------------------------------------- sandboxes

    @property
    def open_failed(self) -> bool:
        """The profile's backend could not be opened (F5 tries again)."""
        return self.backend is None and self.status.state == "unreachable"

    def action_refresh(self) -> None:
        """Read everything shown again; what is read of a sandbox waits for the listing,
        which is the only request a refresh makes of a sandbox that is gone (any other
        makes it again): `refresh_listed`. A profile that could not be opened is opened
        again."""
        if self.open_failed:
            self.switch_profile(self.profile)
            return
        self.connection.load_sandboxes(refresh=True)
        self.connection.load_runtimes()
        self.connection.check_health()

    def refresh_listed(self, listed: set[str]) -> None:
        """The rest of a refresh, of the `listed` sandboxes: the tabs' runs by other
        clients, the selected sandbox's info, and the expanded folders and open files."""
        for pane in self.tabs.repls:
            pane.catch_up()  # a tab of a sandbox not listed is marked gone: it asks nothing
        selected = self.selected_sandbox_id
        node = None if selected is None else self.sandbox_tree.sandbox_node(selected)
        if selected in listed and not (node is not None and node.is_expanded):
            # An expanded one's is read already.
            self.connection.load_sandbox_info(selected, check_listed=False)
        for sandbox_id in sorted(listed):
            self.refresh_workspace(sandbox_id)

    def action_show_runtimes(self) -> None:
        self.show_tab(RUNTIMES_TAB)

    def action_prepare_engine(self) -> None:
        backend = self.backend
        if backend is None or backend.engines is None:
            self.notify("This backend's runtimes are deployed Workers.", severity="warning")
            return
        target = self.engine_to_prepare()
        if target is None:
            self.show_tab(RUNTIMES_TAB)
            self.notify("Select a runtime in the Runtimes tab first.", severity="warning")
            return
        self.connection.prepare_engine(backend, target[0])

    def engine_to_prepare(self) -> tuple[str, str] | None:
        """The language `action_prepare_engine` prepares, and whose it is (for the palette's
        title): the active REPL's, else the Runtimes tab's selected runtime's."""
        repl = self.active_repl
        if repl is not None:
            return repl.context.language, f"the {repl.context.binding} tab"
        binding = self.runtimes_table.selected_binding
        runtime = next((item for item in self.runtimes if item.binding == binding), None)
        if runtime is None:
            return None
        return runtime.language, f"the selected runtime {runtime.binding}"

    def action_create_sandbox(self) -> None:
        def created(sandbox_id: str | None) -> None:
            if sandbox_id is None:
                return
            if self.sandbox_tree.sandbox_node(sandbox_id) is not None:  # it said nothing
                self.notify(f"Sandbox {sandbox_id} exists already: it is selected.", timeout=4)
            # Highlighted once made (`SandboxInfoLoaded.created`): a refused id (`..` on a
            # gateway) was the one F3, F4 and F8 acted on.
            self.connection.create_sandbox(sandbox_id)
            self.show_tab(INFO_TAB)

        self.app.push_screen(CreateSandboxScreen(), created)

    def action_destroy_sandbox(self) -> None:
        sandbox_id = self.selected_sandbox_id
        if sandbox_id is None:
            return

        running = [
            pane
            for pane in self.tabs.repls
            if pane.sandbox_id == sandbox_id and pane.running and not pane.showing_watch_run
        ]
        watch = self.folder_watch.active
        if watch is not None and watch.sandbox_id != sandbox_id:
            watch = None

        def confirmed(yes: bool | None) -> None:
            if not yes:
                return
            for pane in running:  # the destroy would wait for them to end (QA)
                if pane.running:
                    pane.cancel_run()
            # A watch's run would hold the destroy, and a pass still uploading (of a
            # watch stopped before, too: found in review) make the sandbox again.
            if watch is not None and self.folder_watch.active is watch:
                self.stop_watch("stopped: its sandbox is destroyed")
            ending = [each.ended for each in self.folder_watch.into(sandbox_id)]
            self.connection.destroy_sandbox(sandbox_id, after=ending)

        on = "" if self.backend is None else f" on {describe_backend(self.backend)}"
        question = (
            f"Destroy sandbox {sandbox_id}{on}?\n"
            "Its files, env vars, contexts and history are deleted."
        )
        if running:
            titles = ", ".join(pane.title for pane in running)
            question += f"\nThe cells running in it are cancelled first (tabs {titles})."
        if watch is not None:
            question += f"\nThe folder watch of {watch.folder} into it stops first."
        self.app.push_screen(ConfirmScreen(question, "Destroy"), confirmed)

    @on_report(SandboxDestroyWaits)
    def sandbox_destroy_waits(self, message: SandboxDestroyWaits) -> None:
        self.notify(
            f"Destroying {message.sandbox_id} waits for the run in progress in it to end "
            "(another client's, or one of this workbench's being cancelled), or for this "
            "workbench's folder watch into it to end its pass.",
            title="Sandbox",
        )

    @on_report(SandboxDestroyed)
    async def sandbox_destroyed(self, message: SandboxDestroyed) -> None:
        for pane in self.tabs.repls:
            if pane.sandbox_id == message.sandbox_id:
                await self.tabs.close_repl(pane.context.id)
        self.sandbox_infos.pop(message.sandbox_id, None)
        if self.highlighted_sandbox_id == message.sandbox_id:
            self.highlighted_sandbox_id = None
        info = self.info_panel.info
        if info is not None and info.id == message.sandbox_id:
            self.info_panel.info = None
        self.notify(f"Destroyed {message.sandbox_id}", title="Sandbox")
        self.app.refresh_bindings()

    def action_edit_env_vars(self) -> None:
        sandbox_id = self.selected_sandbox_id
        if sandbox_id is None:
            return
        info = self.sandbox_infos.get(sandbox_id)
        if info is None:
            self.connection.load_sandbox_info(sandbox_id)
            self.notify("Loading the sandbox; try again in a moment.", severity="warning")
            return
        backend = self.connection.backend_or_warn()
        if backend is None:
            return
        save = partial(self.connection.save_env_vars, backend, sandbox_id)
        self.app.push_screen(EnvVarsScreen(sandbox_id, dict(info.env_vars), save))

    def action_toggle_env_reveal(self) -> None:
        self.info_panel.reveal_env = not self.info_panel.reveal_env
        self.show_tab(INFO_TAB)


def with_run(info: SandboxInfo, context_id: str, result: ExecutionResult, now: str) -> SandboxInfo:
    """`info` as a run in `context_id` left it, from what its result says."""
    ref = result.context
    if ref is None:
        return info
    contexts = [
        replace(context, executions=ref.executions, cwd=ref.cwd, last_used=now)
        if context.id == context_id
        else context
        for context in info.contexts
    ]
    expires_at = info.expires_at if ref.expires_at is None else ref.expires_at
    return replace(info, contexts=contexts, last_used=now, expires_at=expires_at)


def checkpoints_line(usage: CheckpointUsage) -> str:
    """`2, 1.8 MiB of a 256.0 MiB budget (local and serve only)`."""
    return (
        f"{usage.count}, {human_bytes(usage.sandbox_bytes)} of a "
        f"{human_bytes(usage.budget_bytes)} budget (local and serve only)"
    )


def cost_line(cost: CostTotal, prices: Prices) -> str:
    """`≈ $0.0000123 on Workers for the 25 runs kept (an estimate, not a bill; prices of …)`."""
    return (
        f"≈ {dollars_text(cost.usd)} on Workers for the {counted(cost.runs, 'run')} kept "
        f"({ESTIMATE_NOTE}; prices of {prices.date or 'unknown date'})"
    )
