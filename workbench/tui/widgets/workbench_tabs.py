"""The tabs of the main screen: the sandbox info, the runtimes, a REPL per open context and
a view per open file."""

from __future__ import annotations

from pathlib import PurePosixPath

from textual.await_complete import AwaitComplete
from textual.content import Content
from textual.css.query import NoMatches
from textual.widget import Widget
from textual.widgets import TabbedContent, TabPane
from textual.widgets.tabbed_content import ContentTab, ContentTabs

from workbench.api import short_id
from workbench.tui.untrusted import one_line, shown_content
from workbench.tui.widgets.file_view import FileView
from workbench.tui.widgets.repl_pane import ReplPane

INFO_TAB = "info-tab"
RUNTIMES_TAB = "runtimes-tab"


def repl_tab_id(context_id: str) -> str:
    return f"repl-{context_id}"


class WorkbenchTabs(TabbedContent):
    """Fixed tabs plus one `repl-<context id>` tab per open context and one `file-<n>`
    tab per open file."""

    files_opened = 0
    """How many file tabs were added (their ids count them)."""

    @property
    def active_pane(self) -> TabPane | None:
        """The active pane; None also while the active tab's pane is being removed (when
        Textual's own raises NoMatches, and the footer asks which actions apply)."""
        try:
            return super().active_pane
        except NoMatches:
            return None

    @property
    def active_repl(self) -> ReplPane | None:
        # A REPL is its tab's only child: looking no deeper spares a walk of its cells
        # (asked on every key, by the app's `check_action`).
        pane = self.active_pane
        found = pane.query_children(ReplPane) if pane is not None else None
        return found.first() if found else None

    @property
    def repls(self) -> list[ReplPane]:
        return list(self.query(ReplPane))

    def tab_ids(self) -> list[str]:
        """Every tab's id, in the order the tab bar shows them (a pane added before or
        after another is mounted last all the same: the panes' order is not the bar's)."""
        bar = self.get_child_by_type(ContentTabs)
        return [ContentTab.sans_prefix(tab.id) for tab in bar.query(ContentTab) if tab.id]

    def repl_for(self, context_id: str) -> ReplPane | None:
        found = self.query(f"#{repl_tab_id(context_id)} ReplPane")
        return found.first(ReplPane) if found else None

    def language_of(self, context_id: str) -> str | None:
        """The language of the context's open REPL (None when it is not open)."""
        pane = self.repl_for(context_id)
        return pane.context.language if pane is not None else None

    async def add_repl(self, pane: ReplPane, *, beside: str | None = None) -> None:
        """Add `pane` as the tab of its context (none is open: the caller checks), last or
        right after the tab of context `beside` (when open), and activate it."""
        context = pane.context
        local_only = " (local only)" if context.local_only else ""
        title = shown_content(one_line(f"{context.binding} {short_id(context.id)}{local_only}"))
        after = None
        if beside is not None and self.repl_for(beside) is not None:
            after = self.get_pane(repl_tab_id(beside))
        await self.add_pane(TabPane(title, pane, id=repl_tab_id(context.id)), after=after)
        self.activate(repl_tab_id(context.id))

    @property
    def active_file(self) -> FileView | None:
        pane = self.active_pane
        found = pane.query_children(FileView) if pane is not None else None
        return found.first() if found else None

    def file_views(self, sandbox_id: str) -> list[FileView]:
        """The open views of the sandbox's files."""
        return [view for view in self.query(FileView) if view.sandbox_id == sandbox_id]

    def file_views_of_all(self) -> list[FileView]:
        """Every open file view, of any sandbox."""
        return list(self.query(FileView))

    def unsaved_files(self) -> list[str]:
        """The paths of the open files with unsaved edits."""
        return [view.path for view in self.query(FileView) if view.is_dirty]

    def file_view(self, sandbox_id: str, path: str) -> FileView | None:
        """The open view of the file (its tab id stays when it is renamed: it is not
        derived from the path)."""
        found = [view for view in self.file_views(sandbox_id) if view.path == path]
        return found[0] if found else None

    async def add_file(
        self, view: FileView, *, activate: bool = True, before: FileView | None = None
    ) -> None:
        """Add `view` (of a file with no open view) as a new tab, last or `before` another
        file's, and activate it."""
        self.files_opened += 1
        tab_id = f"file-{self.files_opened}"
        later = None if before is None else file_pane(before)
        await self.add_pane(TabPane(file_title(view), view, id=tab_id), before=later)
        if activate:
            self.activate(tab_id)

    def activate_file(self, view: FileView) -> None:
        pane = file_pane(view)
        if pane is not None and pane.id:
            self.activate(pane.id)

    def show_file_title(self, view: FileView) -> None:
        """The file's name in its tab, marked while it has unsaved edits."""
        pane = file_pane(view)
        if pane is not None and pane.id:
            self.get_tab(pane.id).label = file_title(view)

    def close_file(self, view: FileView) -> AwaitComplete | None:
        pane = file_pane(view)
        return self.remove_pane(pane.id) if pane is not None and pane.id else None

    def close_repl(self, context_id: str) -> AwaitComplete:
        return self.remove_pane(repl_tab_id(context_id))

    def activate(self, tab_id: str, focus_target: Widget | None = None) -> None:
        """Activate the tab. Focus inside the pane being hidden moves first, to
        `focus_target` (what drives the tab shown) or nowhere until that tab takes it:
        Textual would move it to a sibling in the hidden pane, whose focus switches
        straight back to that pane's tab."""
        pane, focused = self.active_pane, self.app.focused
        hiding_focus = focused is not None and pane is not None and pane in focused.ancestors
        if pane is not None and pane.id != tab_id and hiding_focus:
            self.screen.set_focus(focus_target)
        self.active = tab_id
        self.call_after_refresh(self.scroll_to_active_tab)

    def scroll_to_active_tab(self) -> None:
        """Center the active tab in the tab bar. Textual does as it activates the tab,
        which is too early for a tab just added (it has no place yet): with more tabs than
        fit, that one stayed out of sight."""
        tab_bar = self.get_child_by_type(ContentTabs)
        tab = tab_bar.active_tab
        if tab is not None:
            tab_bar.scroll_to_widget(tab, animate=False, center=True, force=True)


def file_pane(view: FileView) -> TabPane | None:
    """The tab pane holding `view`."""
    for ancestor in view.ancestors:
        if isinstance(ancestor, TabPane):
            return ancestor
    return None


FILE_TITLE_CHARS = 32
"""The longest file name a tab shows whole: a name of 255 bytes filled the tab bar and
pushed every other tab out of view (QA); the file's header shows it all."""


def file_title(view: FileView) -> Content:
    """The file's name (from the sandbox: neutralised), its middle elided past
    `FILE_TITLE_CHARS` (its end says its type), with `●` while it has unsaved edits."""
    name = one_line(PurePosixPath(view.path).name or view.path)
    if len(name) > FILE_TITLE_CHARS:
        tail = FILE_TITLE_CHARS // 3
        name = f"{name[: FILE_TITLE_CHARS - tail - 1]}…{name[-tail:]}"
    return shown_content(f"{name} ●" if view.shown_dirty else name)
