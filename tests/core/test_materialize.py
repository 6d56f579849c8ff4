"""Materializing the tree to a host directory and diffing it back after real changes."""

import os
import time
from pathlib import Path

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
    ws = make_ws()
    (tmp_path / "junk").write_text("remove me")
    (tmp_path / "link").symlink_to("/etc")
    ws.materialize(tmp_path)
    assert (tmp_path / "src/a.py").read_text() == "a = 1\n"
    assert (tmp_path / "emptydir").is_dir()
    assert not (tmp_path / "junk").exists() and not (tmp_path / "link").is_symlink()
    diff = ws.diff_directory(tmp_path)
    assert not diff.changed and diff.dirs == ws.dirs() and diff.violation is None


def test_diff_after_real_changes(tmp_path: Path) -> None:
    ws = make_ws()
    ws.materialize(tmp_path)
    time.sleep(0.002)
    (tmp_path / "src/a.py").write_text("a = 2\n")  # same size, updated content
    (tmp_path / "new.txt").write_bytes(b"\x00\x01")
    (tmp_path / "top.txt").unlink()
    (tmp_path / "newdir/deeper").mkdir(parents=True)
    (tmp_path / "emptydir").rmdir()
    (tmp_path / "escape").symlink_to("/etc")
    os.mkfifo(tmp_path / "fifo")
    diff = ws.diff_directory(tmp_path)
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
    cs = ws.apply_diff(diff, now=50)
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
    ws.materialize(tmp_path)
    assert not (tmp_path / "escape").is_symlink() and not (tmp_path / "fifo").exists()
    assert not ws.diff_directory(tmp_path).changed


def test_limit_violation_refused(tmp_path: Path) -> None:
    ws = make_ws()
    ws.materialize(tmp_path)
    (tmp_path / "huge").write_bytes(b"\0" * (MAX_FILE_BYTES + 1))
    diff = ws.diff_directory(tmp_path)
    assert diff.violation is not None and diff.violation.errno == "EFBIG"
    before = ws.rows()
    try:
        ws.apply_diff(diff, now=9)
    except Exception as exc:  # the WorkspaceOSError itself
        assert getattr(exc, "errno", None) == "EFBIG"
    else:
        raise AssertionError("expected the diff to be refused")
    assert ws.rows() == before
    ws.materialize(tmp_path)  # restores the directory to the tree
    assert not (tmp_path / "huge").exists()


def test_entry_limit_on_diff(tmp_path: Path) -> None:
    ws = Workspace()
    ws.materialize(tmp_path)
    for i in range(4097):
        (tmp_path / f"f{i}").touch()
    diff = ws.diff_directory(tmp_path)
    assert diff.violation is not None
    assert diff.violation.message == "Workspace exceeds 4096 entries"


def test_speed_1000_files(tmp_path: Path) -> None:
    ws = Workspace()
    for i in range(1000):
        ws.write(f"f{i:04d}.txt", f"file {i}\n", now=1)
    t0 = time.perf_counter()
    ws.materialize(tmp_path)
    t1 = time.perf_counter()
    diff = ws.diff_directory(tmp_path)
    t2 = time.perf_counter()
    ws.materialize(tmp_path)
    t3 = time.perf_counter()
    diff2 = ws.diff_directory(tmp_path)
    t4 = time.perf_counter()
    print(
        f"materialize {1000 * (t1 - t0):.1f} ms, first diff {1000 * (t2 - t1):.1f} ms, "
        f"re-materialize {1000 * (t3 - t2):.1f} ms, second diff {1000 * (t4 - t3):.1f} ms"
    )
    assert not diff.changed and not diff2.changed
    assert t2 - t0 < 1.0
