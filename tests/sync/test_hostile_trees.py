"""A synced folder is untrusted input: a property test over hostile trees (names with
control characters and undecodable bytes, deep nesting, sparse and huge files, FIFOs,
symlink loops and links out, hostile `.gitignore` lines) for the pass `watch --once`
runs, and `watch --once` itself on one such tree.

The property: the pass ends (no exception, in bounded time), reads at most what the
sandbox can hold and each file once, never uploads anything from outside the folder,
and uploads exactly what fits: every file in the sandbox has its local content, and
every local file it lacks is reported, as too large, as not fitting, or as refused by
the sandbox (its name, or a directory above it).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.sync.conftest import remote_tree
from workbench.api import Backend
from workbench.backends.local import open_local_backend
from workbench.sync import MAX_FILE_BYTES, MAX_WORKSPACE_BYTES, FolderSync, SyncReport
from workbench.sync import local as sync_local
from workbench.sync.local import LocalEntry, read_regular_file, scan_folder


@pytest.fixture(autouse=True)
def remove_deep_trees(tmp_path: Path) -> Iterator[None]:
    """Remove the test's folders with `rm -rf`: Python's rmtree (and so pytest's own
    cleanup of old temp dirs) recurses once per level and fails on 1,600 levels."""
    yield
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=False)


SECRET = b"outside the folder: must never reach the sandbox"
PASS_SECONDS = 60
"""Generous: a pass over the largest generated tree takes a few seconds."""


@dataclass(frozen=True)
class Leaf:
    kind: Literal["file", "sparse", "fifo", "link"]
    content: bytes = b""
    size: int = 0
    target: bytes = b""


@dataclass(frozen=True)
class Directory:
    children: dict[bytes, Leaf | Directory] = field(default_factory=dict)


@dataclass(frozen=True)
class HostileTree:
    top: Directory
    depth: int
    """A chain of nested directories this deep (past the sandbox's path limit at ~1500)."""
    sparse: int
    """1 MiB sparse files at the top (more than 16 do not fit)."""
    ignore_lines: list[bytes]


NAME_PIECES = st.sampled_from(
    [b"a", b"b", b".", b"-", b" ", b"\t", b"\n", b"\r", b"\x01", b"\x1b[31m", b"\x7f",
     "é".encode(), b"\xff", b"\xc3", b"[", b"*", b"\\", b"!", b"#", b"~", b"x" * 120]
)  # fmt: skip
NAMES = (
    st.lists(NAME_PIECES, min_size=1, max_size=5)
    .map(b"".join)
    .filter(lambda name: name not in (b".", b"..") and len(name) <= 255)
)
LINK_TARGETS = st.sampled_from(
    [b".", b"..", b"../..", b"/", b"missing", b"SELF", b"OUTSIDE_FILE", b"OUTSIDE_DIR"]
)
LEAVES = st.one_of(
    st.builds(Leaf, st.just("file"), content=st.binary(max_size=64)),
    st.builds(
        Leaf,
        st.just("sparse"),
        size=st.sampled_from([MAX_FILE_BYTES, MAX_FILE_BYTES + 1, 8 * MAX_FILE_BYTES, 1 << 40]),
    ),
    st.just(Leaf("fifo")),
    st.builds(Leaf, st.just("link"), target=LINK_TARGETS),
)
NODES = st.recursive(
    LEAVES,
    lambda children: st.dictionaries(NAMES, children, max_size=4).map(Directory),
    max_leaves=10,
)
IGNORE_LINES = st.sampled_from(
    [b"*a*a*a*a*a*a*a*a*a*a*a*a*b", b"**/" * 20 + b"*a*a*a*a*b", b"[!a]*", b"!*",
     b"*.bin", b"\\#*", b"d/**/d", b"\xff*", b"[[:cntrl:]]*", b"*\\", b"[", b"x" * 120]
)  # fmt: skip
TREES = st.builds(
    HostileTree,
    st.dictionaries(NAMES, NODES, max_size=6).map(Directory),
    depth=st.one_of(st.just(0), st.integers(1, 40), st.integers(1400, 1600)),
    sparse=st.integers(0, 20),
    ignore_lines=st.lists(IGNORE_LINES, max_size=3),
)


def build(tree: HostileTree, root: Path, outside: Path) -> None:
    """Make `tree` under `root` (names as bytes: not all of them decode)."""

    def make(directory: bytes, node: Directory) -> None:
        for name, child in node.children.items():
            path = os.path.join(directory, name)
            if isinstance(child, Directory):
                os.mkdir(path)
                make(path, child)
            elif child.kind in ("file", "sparse"):
                with open(path, "wb") as stream:
                    stream.write(child.content)
                    stream.truncate(child.size or len(child.content))
            elif child.kind == "fifo":
                os.mkfifo(path)
            else:
                targets = {
                    b"SELF": name,
                    b"OUTSIDE_FILE": bytes(outside / "secret.txt"),
                    b"OUTSIDE_DIR": bytes(outside),
                }
                os.symlink(targets.get(child.target, child.target), path)

    top = bytes(root)
    make(top, tree.top)
    if tree.depth:
        chain = top
        for _ in range(tree.depth):  # os.makedirs recurses once per level
            chain = os.path.join(chain, b"d")
            os.mkdir(chain)
        with open(os.path.join(chain, b"leaf.txt"), "wb") as stream:
            stream.write(b"at the bottom")
    for index in range(tree.sparse):
        with open(root / f"sparse{index:02}.bin", "wb") as stream:
            stream.truncate(MAX_FILE_BYTES)
    if tree.ignore_lines:
        Path(root, ".gitignore").write_bytes(b"\n".join(tree.ignore_lines) + b"\n")


class Reads:
    """The folder files a pass reads, and how many bytes."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.bytes = 0

    def __call__(self, root: Path, relative: str, limit: int) -> bytes | None:
        data = read_regular_file(root, relative, limit)
        self.count[relative] += 1
        self.bytes += len(data or b"")
        return data


def refused(report: SyncReport, relative: str) -> set[str]:
    """The error codes reported for `relative` or a directory above it."""
    return {
        issue.code
        for issue in report.errors
        if relative == issue.path or relative.startswith(issue.path + "/")
    }


async def check_one_pass(backend: Backend, tree: HostileTree, base: Path, reads: Reads) -> None:
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    folder = base / "folder"
    folder.mkdir()
    build(tree, folder, outside)
    sandbox = backend.sandbox(f"hostile-{uuid.uuid4().hex[:12]}")
    try:
        sync = FolderSync(folder, sandbox)
        started = time.monotonic()
        report = await asyncio.wait_for(sync.initial_sync(), PASS_SECONDS)
        assert time.monotonic() - started < PASS_SECONDS
        in_sandbox = await remote_tree(sandbox)
    finally:
        await sandbox.destroy()

    assert reads.bytes <= MAX_WORKSPACE_BYTES
    assert set(reads.count.values()) <= {1}, reads.count
    stored = {path: data for path, data in in_sandbox.items() if data is not None}
    assert SECRET not in stored.values()
    assert sum(map(len, stored.values())) <= MAX_WORKSPACE_BYTES
    local: dict[str, LocalEntry] = {
        path: entry
        for path, entry in scan_folder(folder, sync.rules).entries.items()
        if not entry.is_dir
    }
    for path, data in stored.items():
        assert path in local and (folder / path).read_bytes() == data, path
    small = {path: entry.size for path, entry in local.items() if entry.size <= MAX_FILE_BYTES}
    for path, entry in local.items():
        if path in stored:
            continue
        codes = refused(report, path)
        assert codes, f"{path!r} is neither in the sandbox nor reported"
        if entry.size > MAX_FILE_BYTES:
            assert "FILE_TOO_LARGE" in codes, path
        elif "NO_SPACE" in codes:  # it really did not fit beside the rest
            assert sum(small.values()) > MAX_WORKSPACE_BYTES, path


def test_a_pass_over_a_hostile_tree_uploads_exactly_what_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.new_event_loop()
    backend = open_local_backend(tmp_path / "data", embedded=True)
    try:

        @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
        @given(tree=TREES)
        def check(tree: HostileTree) -> None:
            reads = Reads()
            monkeypatch.setattr(sync_local, "read_regular_file", reads)
            with tempfile.TemporaryDirectory(dir=tmp_path, ignore_cleanup_errors=True) as base:
                loop.run_until_complete(check_one_pass(backend, tree, Path(base), reads))

        check()
    finally:
        loop.run_until_complete(backend.aclose())
        loop.close()


def test_watch_once_on_a_hostile_tree_prints_no_traceback(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    folder = tmp_path / "folder"
    folder.mkdir()
    links: dict[bytes, Leaf | Directory] = {
        b"loop": Leaf("link", target=b"SELF"),
        b"secret": Leaf("link", target=b"OUTSIDE_FILE"),
        b"everything": Leaf("link", target=b"/"),
        b"up": Leaf("link", target=b".."),
    }
    tree = HostileTree(
        Directory(
            {
                b"ctl\x1b[31m\x01\n": Leaf("file", content=b"control characters"),
                b"bad\xff\xfe": Directory({b"in.txt": Leaf("file", content=b"undecodable")}),
                b"pipe": Leaf("fifo"),
                b"huge.bin": Leaf("sparse", size=1 << 40),
                b"links": Directory(links),
            }
        ),
        depth=1600,
        sparse=20,
        ignore_lines=[b"*a*a*a*a*a*a*a*a*a*a*a*a*b", b"["],
    )
    build(tree, folder, outside)
    env = {**os.environ, "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data")}
    script = str(Path(sys.executable).parent / "sandbox-workbench")
    for extra in ([], ["--json"]):
        completed = subprocess.run(
            [script, "watch", str(folder), "--once", "-s", "hostile", *extra],
            capture_output=True,
            env=env,
            timeout=PASS_SECONDS * 2,
        )
        assert completed.returncode == 1, completed.stderr  # not everything fits
        assert b"Traceback" not in completed.stderr, completed.stderr
        assert SECRET not in completed.stdout + completed.stderr
