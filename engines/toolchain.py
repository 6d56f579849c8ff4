"""Running the host build tools of the component engines (npm, node, componentize-py)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from engines.language import PrepareError

FAILURE_DETAIL_LINES = 6
"""How many of a failed tool's last output lines its error quotes."""


def require_program(name: str, purpose: str) -> str:
    """Return the path of `name` or raise a `PrepareError` that says how to fix it."""
    path = shutil.which(name)
    if path is None:
        raise PrepareError(f"{name} not found: install Node.js and npm to {purpose}")
    return path


def run_tool(
    command: list[str],
    *,
    cwd: Path,
    what: str,
    timeout: int,
    env: Mapping[str, str] | None = None,
) -> None:
    """Run a build step; a timeout or a non-zero exit is a `PrepareError` that names
    `what` and quotes the tail of its output."""
    try:
        completed = subprocess.run(
            command,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise PrepareError(f"{what} did not finish within {timeout} s") from error
    if completed.returncode != 0:
        detail = (completed.stderr or completed.stdout).strip().splitlines()
        raise PrepareError(
            f"{what} failed (exit {completed.returncode}): "
            + (" | ".join(detail[-FAILURE_DETAIL_LINES:]) or "no output")
        )
