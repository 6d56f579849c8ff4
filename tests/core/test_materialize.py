"""Materializing the tree to a host directory and diffing it back after real changes."""

import os
import time
from pathlib import Path

from workbench.core.mirror import WorkspaceMirror, apply_diff
from workbench.core.workspace import MAX_FILE_BYTES, Workspace


def make_ws() -> Workspace:
    ws = Workspace()
    ws.mkdir("src/pkg", recursive=True)
    ws.mkdir("emptydir")
    ws.write("src/a.py", "a = 1\n", now=1)
    ws.write("src/pkg/b.txt", "bee", now=1)
    ws.write("top.txt", "top", now=1)
    return ws


def test_materialize_writes_tree(tmp_path: Path) -> None:
    ws, mirror = make_ws(), WorkspaceMirror(tmp_path)
    (tmp_path / "junk").write_text("remove me")
    (tmp_path / "link").symlink_to("/etc")
    mirror.materialize(ws)
    assert (tmp_path / "src/a.py").read_text() == "a = 1\n"
    assert (tmp_path / "emptydir").is_dir()
    assert not (tmp_path / "junk").exists() and not (tmp_path / "link").is_symlink()
    diff = mirror.diff(ws)
    assert not diff.changed and diff.dirs == ws.dirs() and diff.violation is None


def test_diff_after_real_changes(tmp_path: Path) -> None:
    ws, mirror = make_ws(), WorkspaceMirror(tmp_path)
    mirror.materialize(ws)
    time.sleep(0.002)
    (tmp_path / "src/a.py").write_text("a = 2\n")  # same size, updated content
    (tmp_path / "new.txt").write_bytes(b"\x00\x01")
    (tmp_path / "top.txt").unlink()
    (tmp_path / "newdir/deeper").mkdir(parents=True)
    (tmp_path / "emptydir").rmdir()
    (tmp_path / "escape").symlink_to("/etc")
    os.mkfifo(tmp_path / "fifo")
    diff = mirror.diff(ws)
    assert diff.updated == ["/workspace/src/a.py"]
    assert diff.created == ["/workspace/new.txt"]
    assert diff.deleted == ["/workspace/top.txt"]
    assert diff.dirs == [
        "/workspace/newdir",
        "/workspace/newdir/deeper",
        "/workspace/src",
        "/workspace/src/pkg",
    ]
    assert sorted(diff.rejected) == [
        ("/workspace/escape", "symlink"),
        ("/workspace/fifo", "special file"),
    ]
    cs = apply_diff(ws, diff, now=50)
    kinds = {c.path: c.kind for c in cs}
    assert kinds == {
        "/workspace/src/a.py": "file",
        "/workspace/new.txt": "file",
        "/workspace/top.txt": "delete",
        "/workspace/newdir": "dir",
        "/workspace/newdir/deeper": "dir",
        "/workspace/emptydir": "delete",
    }
    assert ws.read("src/a.py") == (b"a = 2\n", 50)
    assert ws.dirs() == diff.dirs
    # the next materialize removes the rejected entries and rewrites nothing else
    mirror.materialize(ws)
    assert not (tmp_path / "escape").is_symlink() and not (tmp_path / "fifo").exists()
    assert not mirror.diff(ws).changed


def test_limit_violation_refused(tmp_path: Path) -> None:
    ws, mirror = make_ws(), WorkspaceMirror(tmp_path)
    mirror.materialize(ws)
    (tmp_path / "huge").write_bytes(b"\0" * (MAX_FILE_BYTES + 1))
    diff = mirror.diff(ws)
    assert diff.violation is not None and diff.violation.errno == "EFBIG"
    before = ws.rows()
    try:
        apply_diff(ws, diff, now=9)
    except Exception as exc:  # the WorkspaceOSError itself
        assert getattr(exc, "errno", None) == "EFBIG"
    else:
        raise AssertionError("expected the diff to be refused")
    assert ws.rows() == before
    mirror.materialize(ws)  # restores the directory to the tree
    assert not (tmp_path / "huge").exists()


def test_entry_limit_on_diff(tmp_path: Path) -> None:
    ws, mirror = Workspace(), WorkspaceMirror(tmp_path)
    mirror.materialize(ws)
    for i in range(4097):
        (tmp_path / f"f{i}").touch()
    diff = mirror.diff(ws)
    assert diff.violation is not None
    assert diff.violation.message == "Workspace exceeds 4096 entries"


def test_speed_1000_files(tmp_path: Path) -> None:
    ws, mirror = Workspace(), WorkspaceMirror(tmp_path)
    for i in range(1000):
        ws.write(f"f{i:04d}.txt", f"file {i}\n", now=1)
    t0 = time.perf_counter()
    mirror.materialize(ws)
    t1 = time.perf_counter()
    diff = mirror.diff(ws)
    t2 = time.perf_counter()
    mirror.materialize(ws)
    t3 = time.perf_counter()
    diff2 = mirror.diff(ws)
    t4 = time.perf_counter()
    print(
        f"materialize {1000 * (t1 - t0):.1f} ms, first diff {1000 * (t2 - t1):.1f} ms, "
        f"re-materialize {1000 * (t3 - t2):.1f} ms, second diff {1000 * (t4 - t3):.1f} ms"
    )
    assert not diff.changed and not diff2.changed
    assert t2 - t0 < 1.0
