"""What a sandbox costs at scale (issue 23): for 10, 40 and 100 sandboxes with one small
Python context each, and a mix of all four languages, the store's size per context, the
PSS of the whole process tree (this process, which holds the local backend, and its
engine processes), the time to create them and to visit each again, and the state lost
(must be 0). Baseline: the same contexts held by the engines alone in one new process.
Run: `python -m benchmarks scale` (or `python -m benchmarks.scale 10` for one size)."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from engines.session import Session
from engines.vfs import VirtualFS
from workbench.backends.local import open_local_backend
from workbench.config import LocalSettings
from workbench.core.workspace import GUEST_LIMITS
from workbench.paths import DATABASE_NAME

SIZES = (10, 40, 100)
MIX = ("PYTHON", "JAVASCRIPT", "PERL", "RUBY")
DEFINE = {
    "PYTHON": "v = {i}",
    "JAVASCRIPT": "var v = {i}",
    "PERL": "our $v = {i}",
    "RUBY": "$v = {i}",
}
USE = {"PYTHON": "v", "JAVASCRIPT": "v", "PERL": "$v", "RUBY": "$v"}
LANGUAGES = {"PYTHON": "python", "JAVASCRIPT": "javascript", "PERL": "perl", "RUBY": "ruby"}
MIB = 1 << 20


def _descendants(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found += [child, *_descendants(child)]
    return found


def _pss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_pss() -> tuple[int, int]:
    """PSS of this process and of its whole tree, in bytes."""
    own = _pss(os.getpid())
    return own, own + sum(_pss(child) for child in _descendants(os.getpid()))


def _store_bytes(data_dir: Path) -> int:
    return sum(path.stat().st_size for path in data_dir.glob(f"{DATABASE_NAME}*") if path.is_file())


async def backend_figures(
    count: int, bindings: tuple[str, ...], data_dir: Path
) -> dict[str, float]:
    settings = LocalSettings(ruby_contexts=True)
    backend = open_local_backend(data_dir, embedded=True, settings=settings)
    empty = _store_bytes(data_dir)
    contexts = []
    started = time.perf_counter()
    for index in range(count):
        binding = bindings[index % len(bindings)]
        sandbox = backend.sandbox(f"scale-{index}")
        context = await sandbox.interpreter.create_code_context(binding)
        await sandbox.interpreter.run_code(DEFINE[binding].format(i=index), context=context)
        contexts.append((sandbox, context, binding))
    created = time.perf_counter() - started
    stored = _store_bytes(data_dir) - empty
    started = time.perf_counter()
    lost = 0
    for index, (sandbox, context, binding) in enumerate(contexts):
        result = await sandbox.interpreter.run_code(USE[binding], context=context)
        lost += [item.text for item in result.results] != [str(index)]
    revisited = time.perf_counter() - started
    backend_pss, total_pss = tree_pss()
    for sandbox, _, _ in contexts:
        await sandbox.destroy()
    await backend.aclose()
    gc.collect()
    after_delete = _store_bytes(data_dir)
    return {
        "store_per_context": stored / count,
        "store_empty": empty,
        "store_after_delete": after_delete,
        "backend_pss": backend_pss,
        "tree_pss": total_pss,
        "create": created,
        "revisit": revisited,
        "lost": lost,
    }


def baseline_pss(count: int, bindings: tuple[str, ...]) -> int:
    """PSS of a new process holding the same contexts as in-process engine sessions."""
    mix = "mix" if len(bindings) > 1 else "python"
    answer = subprocess.run(
        [sys.executable, "-m", "benchmarks.scale", "--baseline", str(count), mix],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(answer.stdout)


def _held_by_engines(count: int, bindings: tuple[str, ...]) -> int:
    """PSS of this process holding the contexts as in-process engine sessions."""
    sessions = []
    try:
        for index in range(count):
            binding = bindings[index % len(bindings)]
            session = Session(LANGUAGES[binding], workspace=VirtualFS(GUEST_LIMITS))
            session.execute(DEFINE[binding].format(i=index))
            sessions.append(session)
        return tree_pss()[1]
    finally:
        for session in sessions:
            session.close()


def report(count: int, bindings: tuple[str, ...]) -> None:
    label = "python" if bindings == ("PYTHON",) else "mix of 4"
    with tempfile.TemporaryDirectory() as scratch:
        figures = asyncio.run(backend_figures(count, bindings, Path(scratch) / "data"))
    print(
        f"{count:>4} sandboxes ({label}): store {figures['store_per_context'] / MIB:6.2f} MiB"
        f"/context; after deleting all {figures['store_after_delete'] / MIB:.2f} MiB "
        f"(empty {figures['store_empty'] / MIB:.2f}); PSS tree {figures['tree_pss'] / MIB:7.0f}"
        f" MiB, backend process {figures['backend_pss'] / MIB:5.0f} MiB; create "
        f"{figures['create']:5.1f} s, revisit {figures['revisit']:5.1f} s; lost "
        f"{int(figures['lost'])}"
    )


def main(argv: list[str] | None = None) -> None:
    if argv and argv[0] == "--baseline":
        print(_held_by_engines(int(argv[1]), MIX if argv[2] == "mix" else ("PYTHON",)))
        return
    sizes = tuple(int(size) for size in argv) if argv else SIZES
    for count in sizes:
        report(count, ("PYTHON",))
        report(count, MIX)
    baseline_count = min(sizes)
    for bindings in (("PYTHON",), MIX):
        pss = baseline_pss(baseline_count, bindings)
        print(
            f"baseline: {baseline_count} contexts ({'python' if len(bindings) == 1 else 'mix'})"
            f" in engines alone, one process: PSS {pss / MIB:.0f} MiB"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
