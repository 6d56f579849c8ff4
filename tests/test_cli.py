"""The command line answers without starting heavy machinery."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from workbench import __version__
from workbench.cli.main import main


def test_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"sandbox-workbench, version {__version__}"


def test_help_lists_command_sections() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "A terminal workbench for sandbox-workers." in result.output


@pytest.mark.parametrize("argv", [["--help"], ["--version"]])
def test_help_and_version_defer_heavy_imports(argv: list[str]) -> None:
    """Neither loads the API (asyncio, the protocol's types: 60 ms of a 130 ms start) nor
    what only a backend needs."""
    probe = (
        "import sys\n"
        "from workbench.cli.main import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = {m.split('.')[0] for m in sys.modules} | set(sys.modules)\n"
        "heavy = {'textual', 'wasmtime', 'httpx', 'google', 'asyncio', 'workbench.api'}\n"
        "print('HEAVY=' + ','.join(sorted(heavy & loaded)))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert "HEAVY=\n" in completed.stdout
