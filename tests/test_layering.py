"""The import arrows of the architecture hold: checked in fresh interpreters."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import importlib, json, pkgutil, sys
package = importlib.import_module({package!r})
skip = {skip!r}
for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    if any(module.name == s or module.name.startswith(s + ".") for s in skip):
        continue
    importlib.import_module(module.name)
print(json.dumps(sorted(name.split(".")[0] for name in sys.modules)))
"""


def loaded_top_level_packages(package: str, skip: tuple[str, ...] = ()) -> set[str]:
    completed = subprocess.run(
        [sys.executable, "-c", PROBE.format(package=package, skip=list(skip))],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return set(json.loads(completed.stdout))


def test_engines_never_loads_workbench_or_textual() -> None:
    loaded = loaded_top_level_packages("engines")
    assert "engines" in loaded
    assert "workbench" not in loaded
    assert "textual" not in loaded


def test_headless_core_never_loads_textual() -> None:
    loaded = loaded_top_level_packages("workbench", skip=("workbench.tui", "workbench.__main__"))
    assert "workbench" in loaded
    assert "textual" not in loaded


def test_tui_talks_only_to_the_api() -> None:
    """`workbench.tui` never imports engines or the store directly."""
    offenders = []
    for path in (ROOT / "workbench" / "tui").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] == "engines" or name.startswith("workbench.store"):
                    offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert offenders == []
