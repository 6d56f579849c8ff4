"""A context's state seen from the REPL: the inspector (its names and their values)
and its checkpoints (save, restore, delete).

`ContextStateHandlers` is the main screen's part: those actions and the handlers of their
reports (the only code here that changes widgets); the calls run in the workers of
`ProfileConnection`. A REPL whose context or sandbox is known gone asks nothing: a request
naming a destroyed sandbox makes it again (`active_live_repl`).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

from textual import on
from textual.screen import Screen

from workbench.api import (
    Backend,
    CodeContext,
    ExecutionResult,
    checkpoint_name_problem,
    short_id,
)
from workbench.tui.key_bindings import action_keys
from workbench.tui.messages import (
    CheckpointDeleted,
    CheckpointNameTaken,
    CheckpointRestored,
    CheckpointSaved,
    CheckpointsLoaded,
    ContextInspected,
    RestoreCounted,
    ValueInspected,
)
from workbench.tui.profile_connection import ProfileConnection
from workbench.tui.screens.checkpoint_picker_screen import (
    CheckpointChoice,
    CheckpointPickerScreen,
    checkpoint_summary,
)
from workbench.tui.screens.confirm_screen import ConfirmScreen
from workbench.tui.screens.name_screen import NameScreen
from workbench.tui.screens.value_screen import ValueScreen
from workbench.tui.widgets.inspector_panel import InspectorPanel
from workbench.tui.widgets.repl_pane import ReplPane
from workbench.tui.widgets.workbench_tabs import WorkbenchTabs
from workbench.tui.worker_reports import on_report


class ContextStateHandlers(Screen[None]):
    """The main screen's inspector and checkpoint actions and its handlers of their
    reports.

    A `Screen` so that Textual registers the `@on` handlers; `MainScreen` inherits it and
    provides the attributes declared here."""

    connection: ProfileConnection
    tabs: WorkbenchTabs
    checkpoints_to_delete: set[str]

    if TYPE_CHECKING:

        def refresh_after_run(
            self, sandbox_id: str, context_id: str, result: ExecutionResult | None
        ) -> None: ...

    @property
    @abstractmethod
    def active_repl(self) -> ReplPane | None:
        """The REPL of the tab shown, if it is one."""

    def active_live_repl(self) -> ReplPane | None:
        """The open REPL, to ask the backend about its context; None when there is none
        or its context or sandbox is known gone (it says so)."""
        repl = self.active_repl
        return None if repl is None or repl.refuses_as_gone() else repl

    def action_toggle_inspector(self) -> None:
        """Show or hide the open REPL's inspector; shown, it reads the names at once where
        that runs no code, and otherwise says how to ask."""
        repl = self.active_repl
        if repl is None or (not repl.inspector_shown and repl.refuses_as_gone()):
            return
        if repl.toggle_inspector():
            self.inspect(repl, check_listed=True)
            repl.inspector.table.focus()

    def inspect(self, repl: ReplPane, *, check_listed: bool) -> None:
        """Read the names for a shown inspector: from a copy of the context where the
        backend can, otherwise wait for the user to ask (`action_inspect_by_running`).
        `check_listed`: the user asked, rather than a run that just found the context."""
        runs_code = not self.connection.inspects_copies
        repl.inspector.expect(runs_code=runs_code)
        if not runs_code:
            self.connection.inspect_context(
                repl.sandbox_id, repl.context, run_code=False, check_listed=check_listed
            )

    def action_inspect_by_running(self) -> None:
        """Inspect the open REPL's context by running the inspector in it (a gateway that
        cannot inspect a copy; elsewhere a copy is read, as always)."""
        repl = self.active_live_repl()
        if repl is None:
            return
        if not repl.inspector_shown:
            repl.toggle_inspector()
        repl.inspector.set_state("running the inspector in the context…")
        self.connection.inspect_context(
            repl.sandbox_id, repl.context, run_code=True, check_listed=True
        )

    @on(InspectorPanel.RunRequested)
    def inspector_run_requested(self, message: InspectorPanel.RunRequested) -> None:
        message.stop()
        self.action_inspect_by_running()

    @on_report(ContextInspected)
    def context_inspected(self, message: ContextInspected) -> None:
        repl = self.tabs.repl_for(message.context_id)
        if repl is None:
            return
        if message.inspection is not None:
            repl.inspector.show_inspection(message.inspection)
            if message.inspection.ran_code:  # a run of the context: the transcript says so
                repl.note_inspector_run(message.inspection.execution_count)
                self.refresh_after_run(repl.sandbox_id, repl.context.id, None)
        elif message.failure is not None:
            repl.inspector.show_failure(message.failure)

    @on(InspectorPanel.ValueRequested)
    def value_requested(self, message: InspectorPanel.ValueRequested) -> None:
        message.stop()
        repl = self.active_live_repl()
        if repl is not None:
            self.connection.inspect_value(
                repl.sandbox_id,
                repl.context,
                message.name,
                0,
                run_code=not self.connection.inspects_copies,
            )

    @on_report(ValueInspected)
    def value_inspected(self, message: ValueInspected) -> None:
        repl = self.tabs.repl_for(message.context_id)
        if repl is None:
            return
        screen = self.app.screen
        if message.offset > 0:  # a next page, for the value screen that asked for it
            if isinstance(screen, ValueScreen) and screen.value_name == message.name:
                if message.value is not None:
                    screen.add_page(message.value)
                else:
                    screen.page_failed(message.failure or "unknown")
            return
        if message.value is not None and message.value.ran_code:  # a run of the context
            repl.note_inspector_run(None)
            self.refresh_after_run(repl.sandbox_id, repl.context.id, None)
        if message.value is None:
            self.notify(message.failure or "", title="Inspecting failed", severity="error")
            return
        sandbox_id, context, name = repl.sandbox_id, repl.context, message.name
        run_code = message.value.ran_code

        def load_page(offset: int) -> None:
            self.connection.inspect_value(sandbox_id, context, name, offset, run_code=run_code)

        self.app.push_screen(ValueScreen(message.value, load_page))

    def action_save_checkpoint(self) -> None:
        """Keep the open REPL's context state under a name the user gives."""
        repl = self.active_live_repl()
        if repl is None:
            return
        context = repl.context

        def named(name: str | None) -> None:
            if name is not None:
                self.connection.save_checkpoint(repl.sandbox_id, context, name)

        title = f"Save a checkpoint of {context.binding} {short_id(context.id)}"
        screen = NameScreen(title, "Save", problem=checkpoint_name_problem)
        self.app.push_screen(screen, named)

    def action_restore_checkpoint(self) -> None:
        """List the open REPL's checkpoints to pick one (`checkpoints_loaded`)."""
        repl = self.active_live_repl()
        if repl is not None:
            self.connection.load_checkpoints(repl.sandbox_id, repl.context)

    def action_delete_checkpoint(self) -> None:
        """List the open REPL's checkpoints to pick one to delete (`checkpoints_loaded`)."""
        repl = self.active_live_repl()
        if repl is not None:
            self.checkpoints_to_delete.add(repl.context.id)
            self.connection.load_checkpoints(repl.sandbox_id, repl.context)

    def delete_checkpoint(self, sandbox_id: str, context: CodeContext, name: str) -> None:
        async def delete(backend: Backend) -> None:
            await backend.sandbox(sandbox_id).interpreter.delete_checkpoint(context.id, name)
            self.post_message(CheckpointDeleted(sandbox_id, context.id, name))

        self.connection.call(
            f"Deleting the checkpoint {name} failed", delete, only_if_listed=sandbox_id
        )

    @on_report(CheckpointDeleted)
    def checkpoint_deleted(self, message: CheckpointDeleted) -> None:
        self.notify(
            f"Deleted {message.name} of context {short_id(message.context_id)}.",
            title="Checkpoint deleted",
        )
        # The checkpoints' usage, of the sandbox the delete just found.
        self.connection.load_sandbox_info(message.sandbox_id, check_listed=False)

    @on_report(CheckpointsLoaded)
    def checkpoints_loaded(self, message: CheckpointsLoaded) -> None:
        deleting = message.context_id in self.checkpoints_to_delete
        self.checkpoints_to_delete.discard(message.context_id)
        repl = self.tabs.repl_for(message.context_id)
        if repl is None:
            return
        if not message.checkpoints:
            keys = action_keys(self, "save_checkpoint")
            self.notify(
                f"Save one first ({keys})." if keys else "Save one first.",
                title="No checkpoints of this context",
            )
            return

        def chosen(choice: CheckpointChoice | None) -> None:
            if choice is not None and choice.delete:
                self.delete_checkpoint(message.sandbox_id, repl.context, choice.name)
            elif choice is not None:
                self.connection.restore_checkpoint(message.sandbox_id, repl.context, choice.name)

        context = f"{repl.context.binding} {short_id(repl.context.id)}"
        picker = CheckpointPickerScreen(message.checkpoints, context, deleting=deleting)
        self.app.push_screen(picker, chosen)

    @on_report(CheckpointNameTaken)
    def checkpoint_name_taken(self, message: CheckpointNameTaken) -> None:
        """Saving would replace a checkpoint of that name: only if the user says so."""
        existing = message.existing

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.connection.save_checkpoint(
                    message.sandbox_id, message.context, existing.name, replace=True
                )

        question = (
            f"The context has a checkpoint {existing.name} already "
            f"({checkpoint_summary(existing)}).\nReplace it with the state as it is now?"
        )
        self.app.push_screen(ConfirmScreen(question, "Replace"), confirmed)

    @on_report(CheckpointSaved)
    def checkpoint_saved(self, message: CheckpointSaved) -> None:
        self.notify(checkpoint_summary(message.checkpoint), title="Checkpoint saved")

    @on_report(RestoreCounted)
    def restore_counted(self, message: RestoreCounted) -> None:
        repl = self.tabs.repl_for(message.context_id)
        if repl is not None:
            repl.bound_last_restore(message.runs)

    @on_report(CheckpointRestored)
    def checkpoint_restored(self, message: CheckpointRestored) -> None:
        repl = self.tabs.repl_for(message.context_id)
        if repl is not None:
            repl.note_restored(checkpoint_summary(message.checkpoint))
            if repl.inspector_shown:  # the names are the checkpoint's now
                self.inspect(repl, check_listed=False)
