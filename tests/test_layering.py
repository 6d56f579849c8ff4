"""The import arrows of the architecture hold: the import-linter contracts in
pyproject.toml, and what fresh interpreters really load (which a static check cannot see)."""

from __future__ import annotations

import json
import re
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


def test_the_import_contracts_hold() -> None:
    """The layer contracts in pyproject.toml (import-linter sees every import statement,
    lazy ones included; what runs at import time is checked above)."""
    linter = Path(sys.executable).with_name("lint-imports")
    completed = subprocess.run(
        [str(linter), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stdout[-3000:]
    assert "0 broken" in completed.stdout


SMALL_MODULE_LINES = 60
KEPT_APART = (
    re.compile(r"workbench\.tui\.(screens|widgets)\.\w+"),  # one screen or widget per file
    re.compile(r"workbench\.cli\.\w+_command"),  # loaded by name when the command runs
    re.compile(r"engines\.\w+\.pins"),  # a language's build input, hashed on its own
    re.compile(r"engines\.components\.wasi\.\w+"),  # one module per WASI interface
    re.compile(r".*_pb2"),  # generated
)


def test_a_small_module_with_one_importer_lives_in_that_module() -> None:
    """Cohesion rather than a line count (docs/architecture.md, Rules): a module of fewer
    than 60 lines that one module imports belongs there, unless its kind is kept apart."""
    import grimp

    graph = grimp.build_graph("workbench", "engines")
    lonely = []
    for module in sorted(graph.modules):
        if any(pattern.fullmatch(module) for pattern in KEPT_APART):
            continue
        source = ROOT.joinpath(*module.split(".")).with_suffix(".py")
        if not source.is_file() or source.name == "__main__.py":
            continue  # a package's __init__, or an entry point
        lines = len(source.read_text().splitlines())
        importers = graph.find_modules_that_directly_import(module)
        if lines < SMALL_MODULE_LINES and len(importers) == 1:
            lonely.append(f"{module} ({lines} lines), imported only by {importers.pop()}")
    assert not lonely, lonely
