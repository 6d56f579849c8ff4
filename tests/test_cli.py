"""The command line answers without starting heavy machinery."""

from __future__ import annotations

import subprocess
import sys

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


def test_help_defers_heavy_imports() -> None:
    probe = (
        "import sys\n"
        "from workbench.cli.main import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "heavy = sorted({'textual', 'wasmtime', 'httpx', 'google'} & loaded)\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert "HEAVY=\n" in completed.stdout
