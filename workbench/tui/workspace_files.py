"""Editing a sandbox's `/workspace` from the workbench: file views that save back, and the
tree's new file, new folder, rename and delete.

`WorkspaceFiles` makes the API calls, each in a worker of the owner (the main screen)
that posts what came of it; `WorkspaceFileHandlers` is the main screen's part: the
actions and the handlers of those messages (the only code here that changes widgets).

A save is a `files/batch` write whose precondition is the version the view's text was
read at (size and modification time, as the directory listing reports them): a file
that changed or went meanwhile (a run, the folder watch, another client) fails it, and
nothing is written until the user chooses to overwrite or to reload. A save, opening or
reloading a file and each tree operation first ask whether the sandbox is still listed,
since their requests would make a destroyed one again: a save then asks whether to
recreate it with the file or to keep the text, and the others are declined.
"""

from __future__ import annotations

from abc import abstractmethod

from textual import on
from textual.screen import Screen
from textual.widget import Widget

from workbench.api import (
    Backend,
    BatchEntry,
    FileState,
    FileSystemError,
    FileVersion,
    PreconditionFailedError,
    ReadFileResult,
    SandboxClient,
    SandboxError,
    SandboxFileNotFoundError,
    SandboxNotFoundError,
)
from workbench.tui.error_messages import Declined, describe_error
from workbench.tui.history_store import OpenFiles
from workbench.tui.messages import (
    DirectoryListed,
    FileGone,
    FileOpened,
    FileSaveConflict,
    FileSaved,
    FileSaveFailed,
    FileSaveSandboxGone,
    PathRenamed,
    WorkspaceChanged,
)
from workbench.tui.profile_connection import ProfileConnection
from workbench.tui.screens.confirm_screen import ConfirmScreen
from workbench.tui.screens.name_screen import NameScreen
from workbench.tui.screens.sandbox_gone_screen import GoneChoice, SandboxGoneScreen
from workbench.tui.screens.save_conflict_screen import ConflictChoice, SaveConflictScreen
from workbench.tui.tree_nodes import DirectoryNode, FileNode
from workbench.tui.widgets.file_view import FileView
from workbench.tui.widgets.sandbox_tree import SandboxTree
from workbench.tui.widgets.workbench_tabs import WorkbenchTabs
from workbench.tui.worker_reports import on_report
from workbench.tui.workspace_paths import (
    WORKSPACE,
    base_name,
    child_path,
    is_within,
    moved_path,
    parent_path,
)

READ_ATTEMPTS = 3
"""How often opening a file lists and reads it when it changes in between."""


class FileKeptChanging(Exception):
    """The file changed between its listing and its read, every time."""


async def listed_version(sandbox: SandboxClient, path: str) -> FileVersion | None:
    """The file's size and modification time as its directory lists them (None: not there)."""
    listing = await sandbox.list_files(parent_path(path), include_hidden=True)
    for entry in listing.files:
        if entry.absolute_path == path and not entry.is_directory:
            return FileVersion(entry.size, entry.modified_at)
    return None


async def read_with_version(
    sandbox: SandboxClient, path: str
) -> tuple[ReadFileResult, FileVersion]:
    """The file's bytes and the version they were read at. The version is listed first,
    so a change between the two makes it older than the bytes: a save then fails its
    precondition rather than overwrite a change it did not see. A size that disagrees
    shows such a change at once, and the file is asked for again."""
    for _ in range(READ_ATTEMPTS):
        version = await listed_version(sandbox, path)
        read = await sandbox.read_file(path, encoding="base64")  # not found: raises
        if version is not None and version.size == read.size:
            return read, version
    raise FileKeptChanging(f"{path} kept changing while it was read; try again")


def version_of(state: FileState | None) -> FileVersion | None:
    """A precondition expecting what is there now (None: expecting nothing there)."""
    return None if state is None else FileVersion(state.size, state.modified_at)


def save_failure(error: Exception) -> str:
    if isinstance(error, SandboxError) and error.http_status in (404, 405):
        return (
            "this backend has no files/batch route, which a save needs to check that the "
            f"file did not change meanwhile; nothing was written ({describe_error(error)})"
        )
    return describe_error(error)


class WorkspaceFiles:
    """The `/workspace` calls of the file views and the tree, on the owner's connection."""

    def __init__(self, owner: Widget, connection: ProfileConnection) -> None:
        self.owner = owner
        self.connection = connection

    def open(
        self,
        sandbox_id: str,
        path: str,
        *,
        activate: bool = True,
        discard_edits: bool = False,
        check_listed: bool = True,
        focus: bool = False,
        reopened: int | None = None,
    ) -> None:
        """Read a file for its view (`FileOpened`; `FileGone` when a view read again
        finds it gone). `check_listed=False`: read again after a run, a change or a
        listing that found the sandbox, rather than opened or reloaded by the user.
        `focus`: its editor takes the focus then (opened from the tree), unless the user
        has gone on to something else meanwhile. `reopened`: the place of a tab open when
        the profile was last left, opened behind the active tab (`FileGone` if it is
        gone)."""
        opened_from = self.owner.screen.focused if focus else None
        profile = self.connection.profile
        reopening = reopened is not None

        async def read(backend: Backend) -> None:
            try:
                content, version = await read_with_version(backend.sandbox(sandbox_id), path)
            except SandboxFileNotFoundError:
                if activate and not reopening:
                    raise
                self.owner.post_message(FileGone(sandbox_id, path))
                return
            except (SandboxError, FileKeptChanging) as error:
                # A tab to reopen that the backend refuses for good (a folder now, a path
                # it does not take) is forgotten, not reported at every start.
                final = not isinstance(error, SandboxError) or error.http_status < 500
                if reopening and final:
                    self.owner.post_message(FileGone(sandbox_id, path))
                    return
                raise
            self.owner.post_message(
                FileOpened(
                    sandbox_id,
                    content,
                    version,
                    activate,
                    discard_edits,
                    focus,
                    opened_from,
                    reopened=reopened,
                    profile=profile,
                )
            )

        only_if_listed = sandbox_id if check_listed else None
        self.connection.call(f"Opening {path} failed", read, only_if_listed=only_if_listed)

    def save(
        self,
        sandbox_id: str,
        path: str,
        text: str,
        expected: FileVersion | None,
        *,
        recreate: bool = False,
    ) -> None:
        """Write `text` if the file is still at `expected` (None: if nothing is there, its
        folders made first, as a file whose folder went is saved again); `FileSaved`,
        `FileSaveConflict`, `FileSaveSandboxGone` or `FileSaveFailed` follows. Only with
        `recreate` is a sandbox written that the backend no longer lists (the write makes
        it again)."""

        async def save(backend: Backend) -> None:
            # Where the backend offers it, the write itself is refused if the sandbox is
            # gone; elsewhere the sandboxes are listed first.
            only_if_exists = not recreate and self.connection.refuses_gone_sandboxes
            if not (recreate or only_if_exists):
                try:
                    listed = await self.connection.still_listed(backend, sandbox_id)
                except Exception as error:
                    self.owner.post_message(FileSaveFailed(sandbox_id, path, describe_error(error)))
                    return
                if not listed:
                    self.owner.post_message(FileSaveSandboxGone(sandbox_id, path))
                    return
            entry = BatchEntry.write(path, text, if_match=expected, if_absent=expected is None)
            entries = (
                [entry]
                if expected is not None
                else [BatchEntry.mkdir(parent_path(path), recursive=True), entry]
            )
            sandbox = backend.sandbox(sandbox_id, must_exist=only_if_exists)
            try:
                answer = await sandbox.files_batch(entries)
            except SandboxNotFoundError:
                self.owner.post_message(await self.connection.list_sandboxes(backend))
                self.owner.post_message(FileSaveSandboxGone(sandbox_id, path))
                return
            except Exception as error:
                self.owner.post_message(FileSaveFailed(sandbox_id, path, save_failure(error)))
                return
            outcome = answer.results[-1]
            failure = (
                next((result.failure for result in answer.results[:-1] if result.failure), None)
                or outcome.failure
            )
            if isinstance(failure, PreconditionFailedError):
                self.owner.post_message(FileSaveConflict(sandbox_id, path, outcome.current))
            elif failure is not None:
                self.owner.post_message(FileSaveFailed(sandbox_id, path, describe_error(failure)))
            else:
                version = FileVersion(len(text.encode()), outcome.timestamp)
                self.owner.post_message(FileSaved(sandbox_id, path, text, version))
                if recreate:  # the tree dropped the sandbox when it found it gone
                    self.connection.load_sandboxes()

        self.connection.call(f"Saving {path} failed", save)

    def create_file(self, sandbox_id: str, path: str) -> None:
        """An empty file, never over one that exists; then its view opens."""
        profile = self.connection.profile

        async def create(backend: Backend) -> None:
            sandbox = backend.sandbox(sandbox_id)
            entry = BatchEntry.write(path, "", if_absent=True)
            failure = (await sandbox.files_batch([entry])).results[0].failure
            if isinstance(failure, PreconditionFailedError):
                raise Declined(f"{path} exists already")
            if failure is not None:
                raise failure
            self.owner.post_message(WorkspaceChanged(sandbox_id, select=path))
            content, version = await read_with_version(sandbox, path)
            self.owner.post_message(
                FileOpened(sandbox_id, content, version, focus=True, profile=profile)
            )

        self.connection.call(f"Creating {path} failed", create, only_if_listed=sandbox_id)

    def create_folder(self, sandbox_id: str, path: str) -> None:
        async def create(backend: Backend) -> None:
            try:
                await backend.sandbox(sandbox_id).mkdir(path)
            except FileSystemError as error:  # said as a new file's is (QA)
                context = error.context if isinstance(error.context, dict) else {}
                if context.get("errno") == "EEXIST":
                    raise Declined(f"{path} exists already") from None
                raise
            self.owner.post_message(WorkspaceChanged(sandbox_id, select=path))

        self.connection.call(f"Creating {path} failed", create, only_if_listed=sandbox_id)

    def rename(self, sandbox_id: str, old_path: str, new_path: str) -> None:
        """Rename, never over something that exists (a rename would replace a file)."""

        async def rename(backend: Backend) -> None:
            sandbox = backend.sandbox(sandbox_id)
            if (await sandbox.exists(new_path)).exists:
                raise Declined(f"{new_path} exists already: rename or delete it first")
            await sandbox.rename_file(old_path, new_path)
            self.owner.post_message(PathRenamed(sandbox_id, old_path, new_path))

        self.connection.call(f"Renaming {old_path} failed", rename, only_if_listed=sandbox_id)

    def delete(self, sandbox_id: str, path: str, *, recursive: bool) -> None:
        async def delete(backend: Backend) -> None:
            await backend.sandbox(sandbox_id).delete_file(path, recursive=recursive or None)
            self.owner.post_message(WorkspaceChanged(sandbox_id))

        self.connection.call(f"Deleting {path} failed", delete, only_if_listed=sandbox_id)

    def list_again(self, sandbox_id: str, paths: list[str]) -> None:
        """List the directories again (`DirectoryListed` each); one that went is skipped
        (its parent's listing drops it)."""

        async def list_all(backend: Backend) -> None:
            sandbox = backend.sandbox(sandbox_id)
            for path in paths:
                try:
                    listing = await sandbox.list_files(path, include_hidden=True)
                except SandboxFileNotFoundError:
                    continue
                self.owner.post_message(DirectoryListed(sandbox_id, path, listing.files))

        self.connection.call("Listing the workspace failed", list_all)


class WorkspaceFileHandlers(Screen[None]):
    """The main screen's file and tree actions and its handlers of their reports.

    A `Screen` so that Textual registers the `@on` handlers; `MainScreen` inherits it and
    provides the attributes declared here."""

    workspace_files: WorkspaceFiles
    sandbox_tree: SandboxTree
    tabs: WorkbenchTabs
    connection: ProfileConnection
    open_files: OpenFiles
    focused_by_open: FileView | None = None
    """The view a file open gave the focus to last: focus there is not the user's move."""

    @property
    @abstractmethod
    def selected_sandbox_id(self) -> str | None:
        """The sandbox whose `/workspace` a new file goes to when no directory is selected."""

    # ----------------------------------------------------------------- file views

    @on_report(FileOpened)
    async def file_opened(self, message: FileOpened) -> None:
        if message.profile is not None and message.profile != self.connection.profile:
            return  # read before a switch to another profile
        view = self.tabs.file_view(message.sandbox_id, message.read.path)
        moved_on = message.reopened is not None or (
            message.opened_from is not None
            and self.focused is not message.opened_from
            # Two files opened in a row: the first one's read took the focus, not the user.
            and not (self.focused_by_open is not None and self.focused_by_open.has_focus_within)
        )
        if view is not None:
            view.offer(message.read, message.version, discard_edits=message.discard_edits)
            if message.activate and not moved_on:
                self.tabs.activate_file(view)
        elif message.activate:
            view = FileView(message.sandbox_id, message.read, message.version)
            view.reopened = message.reopened
            later = None
            if message.reopened is not None:  # before the next reopened tab already there
                places = {
                    other.reopened: other
                    for other in self.tabs.file_views_of_all()
                    if other.reopened is not None and other.reopened > message.reopened
                }
                later = places[min(places)] if places else None
            await self.tabs.add_file(view, activate=not moved_on, before=later)
            self.open_files.opened(self.connection.profile, message.sandbox_id, view.path)
        if message.focus and view is not None and not moved_on:
            view.focus_content()
            self.focused_by_open = view

    @on_report(FileGone)
    def file_gone(self, message: FileGone) -> None:
        view = self.tabs.file_view(message.sandbox_id, message.path)
        if view is not None:
            if not view.gone:  # the tree still lists it (QA: until the next run or F5)
                self.refresh_tree(message.sandbox_id)
            view.show_gone()
        else:  # a tab to reopen: it is not
            self.open_files.closed(self.connection.profile, message.sandbox_id, message.path)

    @on(FileView.DirtyChanged)
    def file_dirty_changed(self, message: FileView.DirtyChanged) -> None:
        self.tabs.show_file_title(message.view)
        self.app.refresh_bindings()

    def reread_open_files(self, sandbox_id: str) -> None:
        """Read the sandbox's open files again (a run or a sync may have changed them);
        a view with unsaved edits keeps them."""
        for view in self.tabs.file_views(sandbox_id):
            self.workspace_files.open(sandbox_id, view.path, activate=False, check_listed=False)

    def refresh_workspace(self, sandbox_id: str) -> None:
        """List the sandbox's expanded directories again (a run, a sync or the tree
        changed files) and read its open files again."""
        self.refresh_tree(sandbox_id)
        self.reread_open_files(sandbox_id)

    def refresh_tree(self, sandbox_id: str) -> None:
        """List the sandbox's expanded directories again, keeping what is expanded and
        selected."""
        directories = self.sandbox_tree.expanded_directories(sandbox_id)
        if directories:
            self.workspace_files.list_again(sandbox_id, directories)

    def action_save_file(self) -> None:
        view = self.tabs.active_file
        if view is None:
            return
        if not view.is_editable:
            self.notify(f"{view.path} is read-only: {view.read_only_reason}.", severity="warning")
        elif view.saving:
            self.notify(f"{view.path} is being saved.", severity="warning")
        elif not (view.is_dirty or view.gone or view.changed_underneath):
            self.notify(f"{view.path} has no unsaved edits.", timeout=2)
        else:
            self.save_view(view, view.version)

    def save_view(
        self, view: FileView, expected: FileVersion | None, *, recreate: bool = False
    ) -> None:
        view.show_saving(True)
        self.workspace_files.save(
            view.sandbox_id, view.path, view.editor.text, expected, recreate=recreate
        )

    @on_report(FileSaved)
    def file_saved(self, message: FileSaved) -> None:
        view = self.tabs.file_view(message.sandbox_id, message.path)
        if view is not None:
            view.saved(message.text, message.version)
        self.notify(f"Saved {message.path}", timeout=2)
        self.refresh_tree(message.sandbox_id)

    @on_report(FileSaveFailed)
    def file_save_failed(self, message: FileSaveFailed) -> None:
        view = self.tabs.file_view(message.sandbox_id, message.path)
        if view is not None:
            view.show_saving(False)
        self.notify(
            f"{message.reason}\nYour edits are still in the editor.",
            title=f"Saving {message.path} failed",
            severity="error",
            timeout=10,
        )

    @on_report(FileSaveConflict)
    def file_save_conflict(self, message: FileSaveConflict) -> None:
        view = self.tabs.file_view(message.sandbox_id, message.path)
        if view is None:
            return
        view.show_saving(False)
        self.refresh_tree(message.sandbox_id)  # it listed the file as it was (QA)
        current = message.current
        if current is None:
            view.show_gone()
            what = "was deleted in the sandbox"
        else:
            view.changed_underneath = True
            view.show_header()
            what = (
                f"changed in the sandbox (now {current.size} bytes, modified {current.modified_at})"
            )
        question = f"{message.path} {what} since you opened it, so your edits were not saved.\n" + (
            "Save your text again (its folders are made again if they went)?"
            if current is None
            else "Overwrite it with your text, or reload it and lose your edits?"
        )

        def chosen(choice: ConflictChoice | None) -> None:
            if not view.is_attached:
                return
            if choice == "overwrite":
                self.save_view(view, version_of(current))
            elif choice == "reload":
                self.reload_view(view)

        self.app.push_screen(SaveConflictScreen(question, gone=current is None), chosen)

    @on_report(FileSaveSandboxGone)
    def file_save_sandbox_gone(self, message: FileSaveSandboxGone) -> None:
        """Ask before making the sandbox again: another client destroyed it, with its
        other files, env vars and contexts."""
        view = self.tabs.file_view(message.sandbox_id, message.path)
        if view is None:
            return
        view.show_saving(False)
        view.show_sandbox_gone()
        question = (
            f"Sandbox {message.sandbox_id} is gone (another client destroyed it, or it "
            f"expired), so {message.path} was not saved.\nRecreate the sandbox, empty but "
            "for this file? Or keep your text: copy it, or keep editing."
        )

        def chosen(choice: GoneChoice | None) -> None:
            if not view.is_attached:
                return
            if choice == "recreate":
                self.save_view(view, None, recreate=True)
            elif choice == "copy":
                self.app.copy_to_clipboard(view.editor.text)
                self.notify(f"Copied the text of {view.path}", timeout=2)

        self.app.push_screen(SandboxGoneScreen(question), chosen)

    def action_reload_file(self) -> None:
        view = self.tabs.active_file
        if view is None:
            return
        if not view.is_dirty:
            self.reload_view(view)
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.reload_view(view)

        question = f"Reload {view.path} from the sandbox?\nYour unsaved edits are lost."
        self.app.push_screen(ConfirmScreen(question, "Reload"), confirmed)

    def reload_view(self, view: FileView) -> None:
        """Read the file again, dropping the view's edits; not from a sandbox found gone
        (the read would make it again, empty)."""
        if view.sandbox_gone:
            self.notify(
                f"Sandbox {view.sandbox_id} is gone: nothing to reload. Your text stays; "
                "saving asks whether to make the sandbox again.",
                title="Reload",
                severity="warning",
            )
            return
        self.workspace_files.open(view.sandbox_id, view.path, discard_edits=True)

    async def close_file(self, view: FileView) -> None:
        """Close the file's tab; with unsaved edits, once the user said to lose them."""
        if not view.is_dirty:
            await self.remove_file(view)
            return

        async def confirmed(yes: bool | None) -> None:
            if yes:
                await self.remove_file(view)

        question = f"{view.path} has unsaved edits.\nClose it and lose them?"
        self.app.push_screen(ConfirmScreen(question, "Discard"), confirmed)

    async def remove_file(self, view: FileView) -> None:
        self.open_files.closed(self.connection.profile, view.sandbox_id, view.path)
        removed = self.tabs.close_file(view)
        if removed is not None:
            await removed
        self.app.refresh_bindings()

    # ----------------------------------------------------------------- tree operations

    def target_directory(self) -> tuple[str, str] | None:
        """The sandbox and directory a new file or folder goes to: the selected directory,
        the selected file's, else the selected sandbox's `/workspace`."""
        selected = self.sandbox_tree.workspace_selection
        if isinstance(selected, DirectoryNode):
            return selected.sandbox_id, selected.path
        if isinstance(selected, FileNode):
            return selected.sandbox_id, parent_path(selected.path)
        sandbox_id = self.selected_sandbox_id
        return None if sandbox_id is None else (sandbox_id, WORKSPACE)

    def action_new_file(self) -> None:
        self.ask_new_path(folder=False)

    def action_new_folder(self) -> None:
        self.ask_new_path(folder=True)

    def ask_new_path(self, *, folder: bool) -> None:
        kind = "folder" if folder else "file"
        target = self.target_directory()
        if target is None:  # the profile's row
            self.notify(
                f"Select a sandbox or a folder of its /workspace in the tree for a new {kind}.",
                severity="warning",
                timeout=4,
            )
            return
        sandbox_id, directory = target

        def named(name: str | None) -> None:
            if name is None:
                return
            path = child_path(directory, name)
            if folder:
                self.workspace_files.create_folder(sandbox_id, path)
            else:
                self.workspace_files.create_file(sandbox_id, path)

        title = f"New {kind} in {directory}/ of {sandbox_id}"
        self.app.push_screen(NameScreen(title, "Create"), named)

    def renamable_selection(self) -> DirectoryNode | FileNode | None:
        """The selected workspace file or directory, other than `/workspace` itself."""
        selected = self.sandbox_tree.workspace_selection
        if selected is None or selected.path == WORKSPACE:
            return None
        return selected

    def path_selection(self, doing: str) -> DirectoryNode | FileNode | None:
        """`renamable_selection`, or None after saying what `doing` needs selected."""
        selected = self.renamable_selection()
        if selected is None:
            self.notify(
                f"Select a file or folder under /workspace in the tree to {doing} it.",
                severity="warning",
                timeout=4,
            )
        return selected

    def action_rename_path(self) -> None:
        selected = self.path_selection("rename")
        if selected is None:
            return
        sandbox_id, path = selected.sandbox_id, selected.path

        def named(name: str | None) -> None:
            if name is not None:
                new_path = child_path(parent_path(path), name)
                self.workspace_files.rename(sandbox_id, path, new_path)

        title = f"Rename {path} to"
        self.app.push_screen(NameScreen(title, "Rename", base_name(path)), named)

    def action_delete_path(self) -> None:
        selected = self.path_selection("delete")
        if selected is None:
            return
        sandbox_id, path = selected.sandbox_id, selected.path
        folder = isinstance(selected, DirectoryNode)

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.workspace_files.delete(sandbox_id, path, recursive=folder)

        question = (
            f"Delete the folder {path} of {sandbox_id}?\n"
            "Everything in it is deleted too (recursively)."
            if folder
            else f"Delete {path} of {sandbox_id}?"
        )
        self.app.push_screen(ConfirmScreen(question, "Delete"), confirmed)

    @on_report(WorkspaceChanged)
    def workspace_changed(self, message: WorkspaceChanged) -> None:
        if message.select is not None:
            self.sandbox_tree.select_when_listed(message.sandbox_id, message.select)
        self.refresh_workspace(message.sandbox_id)

    @on_report(PathRenamed)
    def path_renamed(self, message: PathRenamed) -> None:
        for view in self.tabs.file_views(message.sandbox_id):
            if is_within(view.path, message.old_path):
                old_path = view.path
                view.moved_to(moved_path(view.path, message.old_path, message.new_path))
                self.tabs.show_file_title(view)
                self.open_files.moved(self.connection.profile, view.sandbox_id, old_path, view.path)
        tree = self.sandbox_tree
        # A folder shown expanded stays so under its new name, with its expanded folders
        # (it came back collapsed; QA).
        moved = [
            moved_path(path, message.old_path, message.new_path)
            for path in tree.expanded_directories(message.sandbox_id)
            if is_within(path, message.old_path)
        ]
        tree.expand_wanted.setdefault(message.sandbox_id, set()).update(moved)
        tree.select_when_listed(message.sandbox_id, message.new_path)
        self.refresh_workspace(message.sandbox_id)
