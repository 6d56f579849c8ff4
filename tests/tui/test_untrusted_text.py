"""Pilot tests: text the guest or the backend controls never reaches the terminal raw.

Rich and Textual keep ESC and C1 characters in what they paint. The guest (real Perl
engine) prints escape sequences (an OSC 52 clipboard write, a clear screen, an 8-bit
CSI) to stdout and stderr, returns them as results and in an error, names a file with
one; the backend holds them in env vars, a context's cwd and an error message; a remote
gateway could send them as runtime versions. What the app paints (its screenshot, which
holds every character of every painted segment) has none of them, and shows each as a
visible `\\xNN` (JSON's own `\\u001b` inside JSON strings).
"""

from __future__ import annotations

import io
import re
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console, RenderableType
from textual.app import App
from textual.widgets import Button, Input, Static
from textual.widgets._tabbed_content import ContentTab

from tests.tui.test_flows import Notifications, make_app
from tour import (
    create_context,
    create_sandbox,
    run_cell,
    until_connected,
    wait_for,
)
from workbench.tui.app import WorkbenchApp
from workbench.tui.screens.cell_picker_screen import CellPickerScreen
from workbench.tui.screens.history_search_screen import HistorySearchScreen
from workbench.tui.screens.name_screen import NameScreen
from workbench.tui.tree_nodes import ContextNode, DirectoryNode, FileNode
from workbench.tui.widgets.repl_pane import ReplPane
from workbench.tui.widgets.workbench_tabs import INFO_TAB, RUNTIMES_TAB

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]

PAYLOAD = "\x1b]52;c;SGVsbG8=\x07\x1b[2J\x9b31m"
"""Sets the clipboard to "Hello", clears the screen, then starts an 8-bit CSI."""
SHOWN = "\\x1b]52;c;SGVsbG8=\\x07\\x1b[2J\\x9b31m"
PERL_PAYLOAD = "\\e]52;c;SGVsbG8=\\a\\e[2J\\x{9b}31m"
"""`PAYLOAD` in a Perl string literal."""
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""What a terminal would act on: C0 (but tab and newline), DEL and C1."""


def painted_controls(app: WorkbenchApp) -> list[str]:
    """The control characters in what the app paints now (screen, dialogs, toasts)."""
    return sorted(set(CONTROL.findall(app.export_screenshot())))


def rendered(renderable: RenderableType) -> str:
    """`renderable` as plain text, wide enough that nothing wraps."""
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def transcript_text(repl: ReplPane) -> str:
    return "\n".join(line.text for line in repl.transcript.lines)


def workspace_file_labels(app: WorkbenchApp) -> list[str]:
    """The labels of the files in the tree's /workspace of `demo`, expanding it (again:
    each run reloads the sandbox's info, which rebuilds its subtree) until listed."""
    sandbox = app.main_screen.sandbox_tree.sandbox_node("demo")
    assert sandbox is not None
    for node in sandbox.children:
        if isinstance(node.data, DirectoryNode):
            node.expand()
            return [str(leaf.label) for leaf in node.children if isinstance(leaf.data, FileNode)]
    return []


async def test_guest_output_results_errors_and_file_names(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(160, 50)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PERL")
        await run_cell(
            pilot,
            repl,
            "binmode STDOUT, ':utf8'; binmode STDERR, ':utf8';\n"
            f'my $bad = "{PERL_PAYLOAD}";\n'
            'print "out$bad\\n"; warn "err$bad\\n";\n'
            "open my $fh, '>', \"/workspace/evil\\e[2J.txt\" or die; close $fh;\n"
            "open my $two, '>', \"/workspace/new\\nline.txt\" or die; close $two;\n"
            # Rich drops BEL, backspace and CR from a str: all three named dup.txt (QA).
            'for my $c ("\\a", "\\b", "\\r") { open my $f, ">", "/workspace/dup$c.txt"; }\n'
            "{ k => $bad }",
        )
        await run_cell(pilot, repl, f'"text{PERL_PAYLOAD}"')
        await run_cell(pilot, repl, f'die "boom{PERL_PAYLOAD}\\n"')
        first = repl.transcript.cells[0].result
        # The guest really sent them (and the model, copies and the JSON and notebook
        # exports keep them exact; a Markdown document, read on a terminal too, shows them).
        assert first is not None and first.stdout == [f"out{PAYLOAD}"]
        assert repl.transcript.cells[1].part_text("result") == f"text{PAYLOAD}"
        markdown = tmp_path / "export.md"
        repl.write_export(markdown, "t", repl.transcript.cells, "markdown", overwrite=False)
        exported = markdown.read_text()
        assert exported.count(SHOWN) == 4  # stdout, stderr, text, error
        assert CONTROL.search(exported) is None

        shown = transcript_text(repl)
        assert CONTROL.search(shown) is None
        for line in (f"out{SHOWN}", f"err{SHOWN}", f"text{SHOWN}", f"PerlError: boom{SHOWN}"):
            assert line in shown
        # JSON escapes C0 in strings itself; C1 is left raw by JSON, so neutralised.
        assert '"k": "\\u001b]52;c;SGVsbG8=\\u0007\\u001b[2J\\x9b31m"' in shown

        await wait_for(pilot, lambda: workspace_file_labels(app))
        # A newline in a name is shown too (the tree showed `new`, the rest unseen).
        assert sorted(workspace_file_labels(app)) == [
            "dup\\x07.txt  0 B",
            "dup\\x08.txt  0 B",
            "dup\\x0d.txt  0 B",
            "evil\\x1b[2J.txt  0 B",
            "new\\x0aline.txt  0 B",
        ]
        await pilot.pause()
        assert "SGVsbG8=" in app.export_screenshot()
        assert painted_controls(app) == []

        await pilot.press("alt+y")
        await wait_for(pilot, lambda: isinstance(app.screen, CellPickerScreen))
        for key in ("up", "up"):  # the preview follows the highlighted cell
            await pilot.press(key)
            await pilot.pause()
            assert "SGVsbG8=" in app.export_screenshot()
            assert painted_controls(app) == []
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, CellPickerScreen))

        # The file's tab and header show the newline in its name too.
        app.main_screen.workspace_files.open("demo", "/workspace/new\nline.txt")
        await wait_for(
            pilot, lambda: app.main_screen.tabs.file_view("demo", "/workspace/new\nline.txt")
        )
        labels = [str(tab.label) for tab in app.main_screen.tabs.query(ContentTab)]
        assert "new\\x0aline.txt" in labels
        header = app.main_screen.query_one("#file-header", Static)
        await wait_for(pilot, lambda: str(header.render()).startswith("/workspace/new"))
        assert str(header.render()).startswith("/workspace/new\\x0aline.txt · 0 B")


async def test_code_with_raw_escapes_in_history_and_editor(tmp_path: Path) -> None:
    """Code holding a raw ESC (history may come from a shared `serve`): the transcript,
    the editor it is recalled into and the history search show no control character."""
    app = make_app(tmp_path)
    async with app.run_test(size=(160, 50)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PERL")
        code = f'my $clip = "{PAYLOAD}"; length $clip'
        await run_cell(pilot, repl, code)
        assert repl.history == [code]
        assert f'my $clip = "{SHOWN}"' in transcript_text(repl)
        assert CONTROL.search(transcript_text(repl)) is None

        await pilot.press("up")
        await wait_for(pilot, lambda: repl.code_input.text == code)  # recalled exactly
        await pilot.pause()
        assert "SGVsbG8=" in app.export_screenshot()
        assert painted_controls(app) == []

        await pilot.press("alt+h")
        await wait_for(pilot, lambda: isinstance(app.screen, HistorySearchScreen))
        await pilot.pause()
        assert "SGVsbG8=" in app.export_screenshot()
        assert painted_controls(app) == []


async def test_backend_env_vars_cwd_errors_and_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(tmp_path, health_interval=3600)
    main = app.main_screen
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        backend = app.backend
        assert backend is not None
        sandbox = backend.sandbox("demo")
        await sandbox.set_env_vars({"CLIP": f"v{PAYLOAD}"})
        await sandbox.interpreter.create_code_context("PERL", f"/workspace/w{PAYLOAD}")
        main.action_refresh()
        await wait_for(pilot, lambda: bool(main.sandbox_infos["demo"].contexts))
        main.info_panel.reveal_env = True
        main.show_tab(INFO_TAB)
        await pilot.pause()
        panel = rendered(main.info_panel.render())
        assert f"v{SHOWN}" in panel and f"/workspace/w{SHOWN}" in panel
        context_labels = [
            str(leaf.label)
            for child in main.sandbox_tree.root.children[0].children
            for leaf in child.children
            if isinstance(leaf.data, ContextNode)
        ]
        # BEL too, which a Rich `Text` made of it would drop (found in QA and review).
        assert len(context_labels) == 1 and f"/workspace/w{SHOWN}" in context_labels[0]
        assert "SGVsbG8=" in app.export_screenshot()
        assert painted_controls(app) == []

        # A backend error message, as a notification.
        main.connection.list_directory("demo", f"/workspace/gone{PAYLOAD}")
        await wait_for(pilot, lambda: bool(notes.errors()))
        assert PAYLOAD in notes.errors()[0]  # what the backend said, given to `notify`
        await wait_for(pilot, lambda: "gone" in app.export_screenshot())
        assert painted_controls(app) == []

        # Runtime versions and the core's version, as a remote gateway reports them.
        runtime = replace(main.runtimes[0], engine=f"perl 5.40{PAYLOAD}")
        main.runtimes_table.show_runtimes([runtime], {})
        main.status.versions = f"core 1.0{PAYLOAD} · protocol 1"
        main.show_tab(RUNTIMES_TAB)
        app.clear_notifications()
        await pilot.pause()
        assert f"perl 5.40{SHOWN}" in str(main.runtimes_table.get_row(runtime.binding)[-1])
        assert f"core 1.0{SHOWN}" in main.status.render().plain
        assert app.export_screenshot().count("SGVsbG8=") == 2
        assert painted_controls(app) == []


async def test_a_lone_surrogate_is_copied_as_its_escape(tmp_path: Path) -> None:
    """The clipboard (OSC 52) takes UTF-8, which a lone surrogate in a guest's text
    (a JavaScript result `["a\\ud800b"]`, copied with alt+y) has none of: the app ended
    with a UnicodeEncodeError."""
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 30)):
        app.copy_to_clipboard('["a\ud800b"]')
        assert app.clipboard == '["a\\ud800b"]'


class RenameApp(App[str | None]):
    def on_mount(self) -> None:
        self.push_screen(NameScreen("Rename it to", "Rename", f"osc{PAYLOAD}\u202e.txt"), self.exit)


async def test_the_rename_dialog_edits_a_hostile_name_escaped() -> None:
    """The rename dialog's input painted a guest's file name raw: an OSC sequence set the
    terminal's title (QA). It edits the name as the tree shows it, and says so."""
    app = RenameApp()
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, NameScreen))
        name_input = app.screen.query_one("#name-input", Input)
        assert name_input.value == f"osc{SHOWN}\\u202e.txt"
        assert "shown as escapes" in str(app.screen.query_one("#name-escaped", Static).render())
        assert sorted(set(CONTROL.findall(app.export_screenshot()))) == []
        assert app.screen.query_one("#accept", Button).disabled  # nothing changed yet
        name_input.value = "calm.txt"
        await pilot.pause()
        await pilot.click("#accept")
    assert app.return_value == "calm.txt"
