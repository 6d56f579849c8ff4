"""The workbench Textual app: startup, the global key bindings and the main screen.

The layout, the API calls and the widgets live in `MainScreen` and the modules it
wires together; the app's actions hand each binding to the screen or the active REPL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from weakref import WeakKeyDictionary

from textual import events
from textual._xterm_parser import XTermParser
from textual.app import App, SystemCommand
from textual.await_complete import AwaitComplete
from textual.binding import BindingType
from textual.geometry import Offset
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.selection import Selection
from textual.widget import Widget

from workbench.api import SYSTEM_CLOCK, Backend, Clock, encodable, neutralise
from workbench.config import Config, ConfigError
from workbench.paths import data_dir as resolve_data_dir
from workbench.profiles import LOCAL, open_profile_backend, profile_names
from workbench.transcripts.documents import token_variable
from workbench.tui.history_store import (
    HISTORY_FILE_NAME,
    OPEN_TABS_FILE_NAME,
    LocalHistoryStore,
    OpenTabs,
)
from workbench.tui.key_bindings import (
    BACKEND_ACTIONS,
    FILE_ACTIONS,
    NEW_PATH_ACTIONS,
    PATH_ACTIONS,
    REPL_ACTIONS,
    SANDBOX_ACTIONS,
    WORKBENCH_BINDINGS,
    checked_keymap,
)
from workbench.tui.messages import DaemonNoted
from workbench.tui.palette_commands import WorkbenchCommands
from workbench.tui.profile_connection import BackendFactory
from workbench.tui.screens.confirm_screen import ConfirmScreen
from workbench.tui.screens.help_screen import HelpScreen
from workbench.tui.screens.main_screen import MainScreen
from workbench.tui.screens.profile_picker_screen import ProfilePickerScreen
from workbench.tui.transcript_cell import CellPart
from workbench.tui.widgets.repl_pane import ReplPane

HEALTH_INTERVAL_SECONDS = 15.0

FileSignature = tuple[int, int] | None
"""A file's modification time (ns) and size; None when it cannot be read."""


def file_signature(path: Path) -> FileSignature:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


APP_HELP = """\
## sandbox-workbench

Browse the profile's sandboxes in the sidebar, open a code context to get a REPL,
and run cells. **ctrl+p** opens the command palette with every action; **F1**
shows help for the focused widget.
"""


PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
KEPT_ESC = "\ufdd0"
"""An ESC inside a bracketed paste, as the parser gets it (a noncharacter: never text)."""


@dataclass
class _PasteScan:
    """Where a terminal's input stands: inside a bracketed paste or not, the last
    characters fed outside one (a read may end inside a start marker), and the part of an
    end marker a read split (held until the next: nothing outside a paste is held, so an
    Escape key never waits)."""

    in_paste: bool = False
    tail: str = ""
    held: str = ""

    def guarded(self, data: str) -> str:
        """`data` with each ESC inside a paste replaced by `KEPT_ESC`."""
        data, self.held = self.held + data, ""
        fed: list[str] = []
        position = 0
        while position < len(data):
            if not self.in_paste:
                seen = self.tail + data[position:]
                found = seen.find(PASTE_START)
                if found < 0:
                    fed.append(data[position:])
                    self.tail = seen[-(len(PASTE_START) - 1) :]
                    break
                marker_end = position + found + len(PASTE_START) - len(self.tail)
                fed.append(data[position:marker_end])
                position, self.tail, self.in_paste = marker_end, "", True
                continue
            found = data.find(PASTE_END, position)
            if found < 0:
                rest = data[position:]
                kept = next(
                    (n for n in range(len(PASTE_END) - 1, 0, -1) if rest.endswith(PASTE_END[:n])),
                    0,
                )
                fed.append(rest[: len(rest) - kept].replace("\x1b", KEPT_ESC))
                self.held = rest[len(rest) - kept :]
                break
            fed.append(data[position:found].replace("\x1b", KEPT_ESC) + PASTE_END)
            position, self.in_paste = found + len(PASTE_END), False
        return "".join(fed)


def _mend_textual() -> None:
    """Mend bugs of Textual 8.2.8 (pinned) that end the app on a mouse gesture or a
    double key press, on every screen, Textual's own (the command palette's) too; each
    wraps a public method, and its test reproduces the crash through the workbench's
    screens."""
    widget_and_offset_at = Screen.get_widget_and_offset_at

    def without_removed_widgets(
        screen: Screen[Any], x: int, y: int
    ) -> tuple[Widget | None, Offset | None]:
        """No widget where one was removed since the last paint: the compositor's map
        still held it for a frame, and a mouse-down on it (a closed file tab's header, a
        toast dismissed by the click before) raised AttributeError (Textual issue 6643)."""
        widget, offset = widget_and_offset_at(screen, x, y)
        if widget is not None and widget is not screen and widget.parent is None:
            return None, None
        return widget, offset

    extract = Selection.extract

    def from_the_text(selection: Selection, text: str) -> str:
        """Nothing for a selection that starts past the text's last line: a drag from the
        blank row after a text ending in a newline made copying raise IndexError (Textual
        issue 6708)."""
        if selection.start is not None and selection.start.y >= len(text.splitlines()):
            return ""
        return extract(selection, text)

    dismiss = Screen.dismiss

    def once(screen: Screen[Any], result: Any = None) -> AwaitComplete:
        """Nothing for a screen dismissed already: Enter pressed twice in a dialog (the
        second came before it closed) popped the screen below it, and the main screen's
        pop ended the app (ScreenStackError; QA)."""
        if screen not in screen.app.screen_stack:
            return AwaitComplete()
        return dismiss(screen, result)

    feed = XTermParser.feed
    pastes: WeakKeyDictionary[XTermParser, _PasteScan] = WeakKeyDictionary()

    def pasted_whole(parser: XTermParser, data: str) -> Iterator[Message]:
        """A bracketed paste as one `Paste`, exact: an ESC in it began an escape sequence
        the parser gave up on, and what followed came as keys, ahead of the paste and with
        bindings (QA: `\\x1b[0m\\x12` in a paste ran the cell, ctrl+r). Inside a paste each
        ESC is fed as `KEPT_ESC`, and put back in the `Paste` event."""
        if not data:  # the end of input
            yield from feed(parser, data)
            return
        scan = pastes.setdefault(parser, _PasteScan())
        fed = scan.guarded(data)
        if fed:  # never "": it would end the input
            for message in feed(parser, fed):
                if isinstance(message, events.Paste):
                    message = events.Paste(message.text.replace(KEPT_ESC, "\x1b"))
                yield message

    XTermParser.feed = pasted_whole  # type: ignore[method-assign, assignment]
    Screen.dismiss = once  # type: ignore[method-assign, assignment]
    Screen.get_widget_and_offset_at = without_removed_widgets  # type: ignore[method-assign, assignment]
    Selection.extract = from_the_text  # type: ignore[method-assign, assignment]


_mend_textual()


class WorkbenchApp(App[None]):
    """sandbox-workbench: sandboxes, contexts and a REPL per context."""

    TITLE = "sandbox-workbench"
    CSS_PATH = "app.tcss"
    # A screen class for short terminals (80x24 must stay usable): app.tcss compacts
    # dialogs on `-short` screens so that they fit whole.
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]
    COMMANDS = App.COMMANDS | {WorkbenchCommands}
    HELP = APP_HELP

    BINDINGS: ClassVar[list[BindingType]] = list(WORKBENCH_BINDINGS)
    """Global: their keys work in every screen and widget (dialogs included)."""

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
        no_daemon: bool = False,
    ) -> None:
        """`no_daemon`: open the local store in this process (`--no-daemon`)."""
        super().__init__()
        self.config_problem: str | None = None
        if config is None:
            try:
                config = Config.load()
            except ConfigError as error:
                self.config_problem = str(error)
                config = Config()
        self.config = config
        self.keymap, self.keymap_problems = checked_keymap(config.keys)
        """The config's `[keys]` that apply, and what is wrong with the others."""
        self.config_signature = file_signature(config.path)
        """The config file as it was when `config` was read (or last written) from it."""
        self.started_remote = profile != LOCAL and config.last_remote != profile
        """Started on a remote profile other than the last one: it becomes the last remote
        (so `ctrl+l` comes back to it), saved once the app runs."""
        if self.started_remote:
            config.last_remote = profile
        self.data_dir = resolve_data_dir(data_dir)
        """The local data dir: history, exports and folder-sync state (whatever the profile)."""
        self.given_data_dir = data_dir
        self.no_daemon = no_daemon
        self.local_opened = False
        """The local profile's backend was opened once: opening it again takes the daemon
        that runs, whatever its settings (another client may have restarted it with its
        own: the workbench does not undo them)."""
        self.main_screen = MainScreen(
            profile,
            backend_factory=backend_factory or self.open_profile,
            data_dir=self.data_dir,
            history_store=LocalHistoryStore(self.data_dir / HISTORY_FILE_NAME),
            open_tabs=OpenTabs(self.data_dir / OPEN_TABS_FILE_NAME),
            clock=clock,
            show_measurements=show_measurements,
            health_interval=health_interval,
            prices=self.config.prices,
        )

    def open_profile(self, name: str) -> Backend:
        """The backend of profile `name` (in a worker thread). The first open of the local
        profile asks for this workbench's settings (a flag, the environment, the config),
        restarting a daemon that holds others; every later one (back from a remote
        profile, a rerun there) takes the daemon it finds. Either way a daemon replaced
        meanwhile is said in a notification, not on the stderr the screen covers."""
        local = name == LOCAL

        def note(text: str) -> None:
            self.main_screen.post_message(DaemonNoted(text))

        backend = open_profile_backend(
            name,
            data_dir=self.given_data_dir,
            embedded=True if self.no_daemon else None,
            note=note,
            adopt=local and self.local_opened,
        )
        if local:  # set, never cleared: a remote open on another thread cannot undo it
            self.local_opened = True
        return backend

    def get_default_screen(self) -> MainScreen:
        return self.main_screen

    def on_mount(self) -> None:
        if self.keymap:
            self.set_keymap(self.keymap)
        for problem in self.keymap_problems:
            self.notify(problem, title="Config", severity="warning", timeout=15)
        if self.config.theme and self.config.theme in self.available_themes:
            self.theme = self.config.theme
        elif self.config.theme:
            self.notify(
                f"ui.theme: no theme is named {self.config.theme!r}; the default is used",
                title="Config",
                severity="warning",
                timeout=15,
            )
        self.theme_changed_signal.subscribe(self, self.remember_theme)
        if self.started_remote and not self.config_problem:
            self.save_config()
        if self.config_problem:
            self.notify(self.config_problem, title="Config", severity="error")

    async def on_unmount(self) -> None:
        await self.main_screen.close()

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Every notification (widgets' too): its text often comes from a backend (error
        messages, ids, paths), so it is shown as plain text, never markup (`markup` is
        ignored), with control characters as `\\xNN`."""
        super().notify(
            neutralise(message),
            title=neutralise(title),
            severity=severity,
            timeout=timeout,
            markup=False,
        )

    def copy_to_clipboard(self, text: str) -> None:
        """Every copy (a cell's parts, a curl command): a lone surrogate in a guest's text
        goes as its escape, since the clipboard takes UTF-8."""
        super().copy_to_clipboard(encodable(text))

    # The screen's profile and backend, for callers holding the app (benchmarks, tests).
    @property
    def profile(self) -> str:
        return self.main_screen.profile

    @property
    def backend(self) -> Backend | None:
        """The current profile's open backend (None until it opens)."""
        return self.main_screen.backend

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Textual's palette commands but its Quit: the workbench lists its own (`ctrl+q`,
        which asks first about unsaved edits and running cells)."""
        for command in super().get_system_commands(screen):
            if command.title != "Quit":
                yield command

    # ----------------------------------------------------------------- global actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        screen = self.main_screen
        if action in BACKEND_ACTIONS:
            return screen.backend is not None
        if action == "refresh":  # which opens the profile again when that failed
            return screen.backend is not None or screen.open_failed
        if action in SANDBOX_ACTIONS:
            return screen.backend is not None and screen.selected_sandbox_id is not None
        if action in FILE_ACTIONS:
            file_view = screen.tabs.active_file
            return file_view is not None and file_view.is_editable
        if action in NEW_PATH_ACTIONS | PATH_ACTIONS:  # on a row they need not: said
            return screen.backend is not None
        if action == "close_tab":
            return screen.active_repl is not None or screen.tabs.active_file is not None
        if action in REPL_ACTIONS:
            return screen.active_repl is not None
        if action == "unwatch":
            return screen.folder_watch.active is not None
        if action == "prepare_engine":
            return screen.backend is not None and screen.backend.engines is not None
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

    def reload_config(self) -> None:
        """Read the config file again if it changed since it was read (a profile added or
        removed from a shell): cheap when it did not (one `stat`). A file that cannot be
        read is an error notification, once per change of it, and the config read last
        stays in use."""
        signature = file_signature(self.config.path)
        if signature == self.config_signature:
            return
        self.config_signature = signature
        try:
            config = Config.load(self.config.path)
        except ConfigError as error:
            self.notify(
                f"{error}\nThe profiles read before stay in use until it is fixed.",
                title="Cannot read the config",
                severity="error",
                timeout=10,
            )
            return
        self.config = config

    def current_profile_names(self) -> list[str]:
        """The profiles of the config file as it is now."""
        self.reload_config()
        return profile_names(self.config)

    def action_pick_profile(self) -> None:
        def chosen(profile: str | None) -> None:
            if profile is not None and profile != self.profile:
                self.action_use_profile(profile)

        self.push_screen(ProfilePickerScreen(self.current_profile_names(), self.profile), chosen)

    def action_toggle_remote(self) -> None:
        """Local and back to the remote profile used last; before one was used, the only
        remote profile, or the picker among several, or a note on how to add one (the key
        did nothing, and said nothing)."""
        remotes = [name for name in self.current_profile_names() if name != LOCAL]
        if self.profile != LOCAL:
            self.action_use_profile(LOCAL)
        elif self.config.last_remote in remotes:
            self.action_use_profile(self.config.last_remote)
        elif len(remotes) == 1:
            self.action_use_profile(remotes[0])
        elif remotes:
            self.action_pick_profile()
        else:
            self.notify(
                "There is no remote profile yet: add one with "
                "`sandbox-workbench profiles add NAME --url URL --token-env VAR`.",
                title="Local/remote",
            )

    def action_use_profile(self, profile: str) -> None:
        """Switch to `profile` (the palette's *Switch to profile …*); open files with
        unsaved edits are closed once the user says so."""

        def switch() -> None:
            if profile != LOCAL and self.config.last_remote != profile:
                self.config.last_remote = profile
                self.save_config()
            self.main_screen.switch_profile(profile)
            self.notify(f"Switched to profile {profile}", timeout=2)

        self.unless_work_is_lost(f"Switch to profile {profile}", "Switch", switch)

    async def action_quit(self) -> None:
        """Quit, keeping the code typed in open REPL tabs; with unsaved edits in open
        files, once the user says to lose them."""

        def quit_keeping_drafts() -> None:
            self.main_screen.keep_drafts()
            self.exit()

        self.unless_work_is_lost("Quit", "Quit", quit_keeping_drafts)

    def unless_work_is_lost(self, act: str, confirm_label: str, then: Callable[[], None]) -> None:
        """`then()` now, or, when open files have unsaved edits or cells are running, once
        the user confirms that `act` loses them (a running cell is cancelled)."""
        tabs = self.main_screen.tabs
        unsaved = tabs.unsaved_files()
        running = [repl.title for repl in tabs.repls if repl.running]
        if not unsaved and not running:
            then()
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                then()

        losses = []
        if unsaved:
            losses.append("These files have unsaved edits, which are lost:\n" + "\n".join(unsaved))
        if running:
            losses.append(
                "These contexts are running a cell, which is cancelled:\n" + "\n".join(running)
            )
        question = f"{act}? " + "\n".join(losses)
        self.push_screen(ConfirmScreen(question, confirm_label), confirmed)

    def remember_theme(self, theme: object) -> None:
        if self.config.theme != self.theme:
            self.config.theme = self.theme
            self.save_config()

    def save_config(self) -> None:
        """Write the app's settings into the config file (as it is now: a profile added
        from a shell meanwhile stays)."""
        theme, last_remote = self.config.theme, self.config.last_remote
        self.reload_config()
        self.config.theme, self.config.last_remote = theme, last_remote
        try:
            self.config.save()
        except (OSError, ConfigError) as error:
            self.notify(str(error), title="Cannot save the config", severity="error")
            return
        self.config_signature = file_signature(self.config.path)

    # ----------------------------------------------------------------- main screen actions
    # One explicit (typed, greppable) method per binding: the bindings stay on the app so
    # that their keys work everywhere, the work is the screen's or the active REPL's.

    def action_refresh(self) -> None:
        self.main_screen.action_refresh()

    def action_show_runtimes(self) -> None:
        self.main_screen.action_show_runtimes()

    def action_prepare_engine(self) -> None:
        self.main_screen.action_prepare_engine()

    def action_create_sandbox(self) -> None:
        self.main_screen.action_create_sandbox()

    def action_destroy_sandbox(self) -> None:
        self.main_screen.action_destroy_sandbox()

    def action_edit_env_vars(self) -> None:
        self.main_screen.action_edit_env_vars()

    def action_toggle_env_reveal(self) -> None:
        self.main_screen.action_toggle_env_reveal()

    def action_watch_folder(self) -> None:
        self.main_screen.action_watch_folder()

    def action_unwatch(self) -> None:
        self.main_screen.action_unwatch()

    def action_create_context(self) -> None:
        self.main_screen.action_create_context()

    def action_open_context(self, sandbox_id: str, context_id: str) -> None:
        """Open a context of the selected sandbox (the palette's *Open context …*)."""
        self.main_screen.open_listed_context(sandbox_id, context_id)

    async def action_close_tab(self) -> None:
        await self.main_screen.action_close_tab()

    def action_next_tab(self) -> None:
        self.main_screen.switch_tab(+1)

    def action_previous_tab(self) -> None:
        self.main_screen.switch_tab(-1)

    def action_focus_tree(self) -> None:
        self.main_screen.show_sidebar(True)
        self.main_screen.sandbox_tree.focus()

    def action_toggle_sidebar(self) -> None:
        self.main_screen.show_sidebar(not self.main_screen.sandbox_tree.display)

    def action_save_checkpoint(self) -> None:
        self.main_screen.action_save_checkpoint()

    def action_restore_checkpoint(self) -> None:
        self.main_screen.action_restore_checkpoint()

    def action_delete_checkpoint(self) -> None:
        """Pick one of the open REPL's checkpoints to delete (the palette's command; in
        the `restore_checkpoint` picker, Delete does it too)."""
        self.main_screen.action_delete_checkpoint()

    def action_fork_context(self) -> None:
        self.main_screen.action_fork_context()

    def action_toggle_inspector(self) -> None:
        self.main_screen.action_toggle_inspector()

    def action_inspect_by_running(self) -> None:
        self.main_screen.action_inspect_by_running()

    def action_delete_context(self) -> None:
        self.main_screen.action_delete_context()

    def action_save_file(self) -> None:
        self.main_screen.action_save_file()

    def action_reload_file(self) -> None:
        self.main_screen.action_reload_file()

    def action_new_file(self) -> None:
        self.main_screen.action_new_file()

    def action_new_folder(self) -> None:
        self.main_screen.action_new_folder()

    def action_rename_path(self) -> None:
        self.main_screen.action_rename_path()

    def action_delete_path(self) -> None:
        self.main_screen.action_delete_path()

    def action_reset_context(self) -> None:
        self.main_screen.action_reset_context()

    # ----------------------------------------------------------------- REPL actions

    def in_active_repl(self, act: Callable[[ReplPane], object]) -> None:
        """Do `act` in the active REPL (nothing when no REPL tab is active)."""
        repl = self.main_screen.active_repl
        if repl is not None:
            act(repl)

    def action_run_cell(self) -> None:
        if self.backend is not None:
            self.in_active_repl(ReplPane.run_cell)

    def action_cancel_run(self) -> None:
        if self.backend is not None:
            self.in_active_repl(ReplPane.cancel_run)

    def action_search_history(self) -> None:
        self.in_active_repl(ReplPane.search_history)

    def action_find_in_transcript(self) -> None:
        self.in_active_repl(ReplPane.toggle_find)

    def action_copy_cell(self) -> None:
        self.copy_current_cell("cell")

    def action_copy_result(self) -> None:
        self.copy_current_cell("result")

    def action_copy_curl(self) -> None:
        """The current cell as a `curl` command for the remote profile's gateway, the token
        as an env var reference (the profile's `token_env`, else SANDBOX_WORKBENCH_TOKEN)."""
        self.reload_config()
        profile = self.config.profiles.get(self.profile)
        if profile is None:
            self.notify(
                "Copy as curl needs a remote profile: the local backend answers on its "
                "daemon's socket, not over HTTP (`sandbox-workbench serve` puts it there).",
                severity="warning",
            )
            return
        variable = token_variable(profile.token_env)
        self.in_active_repl(lambda repl: repl.copy_as_curl(profile.url, variable))

    def copy_current_cell(self, part: CellPart) -> None:
        if self.main_screen.active_repl is None:
            self.notify("No cell to copy yet.", severity="warning")
        self.in_active_repl(lambda repl: repl.copy_current_cell(part))

    def action_pick_cell(self) -> None:
        self.in_active_repl(ReplPane.pick_cell)

    def action_export_markdown(self) -> None:
        self.in_active_repl(lambda repl: repl.export_transcript("markdown"))

    def action_export_json(self) -> None:
        self.in_active_repl(lambda repl: repl.export_transcript("json"))

    def action_export_notebook(self) -> None:
        self.in_active_repl(lambda repl: repl.export_transcript("ipynb"))

    def action_diff_cell(self, profile: str | None = None) -> None:
        """Rerun the current cell on `profile` (picked when None) and compare."""
        others = [name for name in self.current_profile_names() if name != self.profile]
        self.main_screen.action_diff_cell(others, profile)


def run_app(profile: str = LOCAL, data_dir: Path | None = None, no_daemon: bool = False) -> int:
    """Run the workbench until it exits; its exit code (1 after a failure it could not
    handle, which Textual has shown)."""
    app = WorkbenchApp(profile, data_dir, no_daemon=no_daemon)
    app.run()
    return app.return_code or 0
