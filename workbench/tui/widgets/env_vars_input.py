"""A `KEY=VALUE`-per-line editor that checks keys as you type."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static, TextArea

from workbench.api.display import counted
from workbench.tui.env_vars_text import ParsedEnvVars, parse_env_vars_text
from workbench.tui.untrusted import ControlFreeTextArea

SHOWN_PROBLEMS = 5
"""Problems listed under the editor, the rest counted: thousands of lines of them (a
sandbox's hostile values pasted) took a second and a half to lay out at every key."""


class EnvVarsInput(Vertical):
    """Env vars, one `KEY=VALUE` per line; `parsed` tells whether they are valid."""

    DEFAULT_CSS = """
    EnvVarsInput { height: auto; }
    EnvVarsInput > TextArea { height: 6; }
    EnvVarsInput > .env-problems { color: $error; height: auto; }
    EnvVarsInput > .env-problems.-valid { color: $success; }
    """

    HELP = """\
## Environment variables

One `KEY=VALUE` per line. Keys must match `^[A-Za-z_][A-Za-z0-9_]*$`;
`#` starts a comment line.
"""

    def __init__(self, text: str = "", *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._initial_text = text

    def compose(self) -> ComposeResult:
        # The sandbox's values come from the backend: control characters are not painted.
        yield ControlFreeTextArea(self._initial_text, tab_behavior="focus", classes="env-text")
        yield Static("", classes="env-problems", markup=False)

    @property
    def parsed(self) -> ParsedEnvVars:
        return parse_env_vars_text(self.query_one(".env-text", TextArea).text)

    def show_problems(self, parsed: ParsedEnvVars) -> None:
        label = self.query_one(".env-problems", Static)
        label.set_class(parsed.valid, "-valid")
        count = len(parsed.values)
        problems = parsed.problems[:SHOWN_PROBLEMS]
        if len(parsed.problems) > SHOWN_PROBLEMS:
            problems.append(f"… {counted(len(parsed.problems) - SHOWN_PROBLEMS, 'more problem')}")
        shown = "\n".join(problems) if problems else f"✓ {counted(count, 'variable')}"
        label.update(shown)
