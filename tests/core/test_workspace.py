"""Workspace tree operations, limits, change sets, and the engines' copy (spec 5, 6)."""

from collections.abc import Hashable

import pytest

from engines.vfs import PathState, VirtualFS
from workbench.core.paths import WorkspaceOSError
from workbench.core.workspace import (
    GUEST_LIMITS,
    LOG_PATHS,
    MAX_ENTRIES,
    MAX_FILE_BYTES,
    Workspace,
)


def err(fn: object, *args: object, **kw: object) -> tuple[str, str]:
    with pytest.raises(WorkspaceOSError) as ei:
        fn(*args, **kw)  # type: ignore[operator]
    return ei.value.errno, ei.value.message


def test_write_read_and_changes() -> None:
    ws = Workspace()
    ws.mkdir("d")
    cs = ws.write("d/a.txt", "hi", now=5)
    assert [(c.kind, c.path, c.data, c.updated_at) for c in cs] == [
        ("file", "/workspace/d/a.txt", b"hi", 5)
    ]
    assert ws.read("/workspace/d/a.txt") == (b"hi", 5)
    assert ws.info() == {"files": 2, "bytes": 2}
    assert err(ws.read, "nope") == ("ENOENT", "No such file: nope")
    assert err(ws.read, "d") == ("EISDIR", "Is a directory: d")
    assert err(ws.read, "/workspace") == ("EISDIR", "Is a directory: /workspace")
    assert err(ws.read, "d/a.txt/x") == ("ENOTDIR", "Not a directory")


def test_write_errors_leave_tree_unchanged() -> None:
    ws = Workspace()
    ws.write("f", "x", now=1)
    before = ws.rows()
    assert err(ws.write, "/workspace", "x", now=1) == (
        "EISDIR",
        "Cannot write to the /workspace root",
    )
    assert err(ws.write, "a/b", "x", now=1) == ("ENOENT", "No such file or directory")
    assert err(ws.write, "f/b", "x", now=1) == ("ENOTDIR", "Not a directory")
    assert err(ws.write, "g", "%%%", now=1, encoding="base64") == (
        "EINVAL",
        "Invalid base64 content",
    )
    ws.mkdir("dir")
    assert err(ws.write, "dir", "x", now=1) == ("EISDIR", "Is a directory: dir")
    assert ws.rows()[:1] == before


def test_file_size_boundary() -> None:
    ws = Workspace()
    ws.write("ok", b"\0" * MAX_FILE_BYTES, now=1)
    with pytest.raises(WorkspaceOSError) as ei:
        ws.write("big", b"\0" * (MAX_FILE_BYTES + 1), now=1)
    assert ei.value.errno == "EFBIG" and ei.value.message == "File exceeds 1048576 bytes"
    assert ei.value.extra == {"maxSize": 1048576, "actualSize": 1048577}


def test_total_bytes_boundary() -> None:
    ws = Workspace()
    chunk = b"\0" * MAX_FILE_BYTES
    for i in range(16):
        ws.write(f"f{i}", chunk, now=1)
    assert ws.info()["bytes"] == 16 * 1024 * 1024
    assert err(ws.write, "one-more", b"x", now=1) == ("ENOSPC", "Workspace exceeds 16 MiB total")
    ws.write("f0", chunk, now=2)  # replacing keeps the total
    ws.write("f1", b"", now=2)
    ws.write("x", b"\0" * MAX_FILE_BYTES, now=2)


def test_entry_boundary() -> None:
    ws = Workspace()
    for i in range(MAX_ENTRIES - 1):
        ws.write(f"f{i}", b"", now=1)
    ws.mkdir("last")
    assert ws.info()["files"] == 4096
    assert err(ws.write, "x", b"", now=1) == ("ENOSPC", "Workspace exceeds 4096 entries")
    assert err(ws.mkdir, "y") == ("ENOSPC", "Workspace exceeds 4096 entries")
    assert err(ws.mkdir, "last/a/b", recursive=True) == ("ENOSPC", "Workspace exceeds 4096 entries")
    ws.write("f0", b"replace ok", now=2)
    assert ws.info()["files"] == 4096


def test_mkdir_rules() -> None:
    ws = Workspace()
    assert not ws.mkdir("/workspace")
    assert err(ws.mkdir, "a/b") == ("ENOENT", "No such file or directory")
    cs = ws.mkdir("a/b/c", recursive=True)
    assert [c.path for c in cs] == ["/workspace/a", "/workspace/a/b", "/workspace/a/b/c"]
    assert not ws.mkdir("a/b", recursive=True)
    assert err(ws.mkdir, "a") == ("EEXIST", "Already exists: a")
    ws.write("a/f", "", now=1)
    assert err(ws.mkdir, "a/f/g", recursive=True) == ("ENOTDIR", "Not a directory")
    assert err(ws.mkdir, "a/f/g") == ("ENOTDIR", "Not a directory")


def test_delete_rules() -> None:
    ws = Workspace()
    ws.mkdir("d/e", recursive=True)
    ws.write("d/e/f", "x", now=1)
    assert err(ws.delete, "/workspace") == ("EACCES", "Cannot delete the /workspace root")
    assert err(ws.delete, "missing") == ("ENOENT", "No such file or directory: missing")
    assert err(ws.delete, "zz/missing") == ("ENOENT", "No such file or directory")
    assert not ws.delete("missing", force=True)
    assert not ws.delete("zz/missing", force=True)
    assert err(ws.delete, "d/e/f/x", force=True) == ("ENOTDIR", "Not a directory")
    ws.mkdir("empty")
    assert err(ws.delete, "empty") == (
        "EISDIR",
        "Cannot delete directory with deleteFile() at 'empty'. "
        "Pass { recursive: true } to delete a directory.",
    )
    cs = ws.delete("d", recursive=True)
    assert sorted(c.path for c in cs) == ["/workspace/d", "/workspace/d/e", "/workspace/d/e/f"]
    assert all(c.kind == "delete" for c in cs)
    assert ws.info() == {"files": 1, "bytes": 0}


def test_rename_rules() -> None:
    ws = Workspace()
    ws.mkdir("d")
    ws.write("d/f", "x", now=7)
    ws.write("g", "y", now=8)
    ws.mkdir("full")
    ws.write("full/z", "", now=1)
    ws.mkdir("empty")
    assert err(ws.rename, "/workspace", "x") == ("EACCES", "Cannot rename the /workspace root")
    assert err(ws.rename, "g", "/workspace") == ("EACCES", "Cannot rename onto the /workspace root")
    assert err(ws.rename, "nope", "x") == ("ENOENT", "No such file or directory: nope")
    assert err(ws.rename, "g", "no/x") == ("ENOENT", "No such file or directory")
    assert err(ws.rename, "g", "g/x") == ("ENOTDIR", "Not a directory")
    assert err(ws.rename, "d", "g") == ("ENOTDIR", "Not a directory: g")
    assert err(ws.rename, "g", "d") == ("EISDIR", "Is a directory: d")
    assert err(ws.rename, "d", "full") == ("ENOTEMPTY", "Directory not empty: full")
    assert err(ws.rename, "d", "d/sub") == ("EINVAL", "Cannot move a directory into itself: d/sub")
    assert err(ws.rename, "../x", "a") == ("EACCES", "Path escapes /workspace: ../x")
    cs = ws.rename("g", "d/f")  # file over file replaces
    assert ws.read("d/f") == (b"y", 8)
    assert {(c.kind, c.path) for c in cs} == {
        ("delete", "/workspace/g"),
        ("file", "/workspace/d/f"),
    }
    cs = ws.move("d", "empty")  # dir over empty dir replaces
    assert ws.read("empty/f") == (b"y", 8)
    assert cs.get("/workspace/d/f") is not None and cs.get("/workspace/d/f").kind == "delete"  # type: ignore[union-attr]
    assert ws.info() == {"files": 4, "bytes": 1}
    ws.rename("empty/f", "empty/f")  # same path: no-op
    assert ws.read("empty/f") == (b"y", 8)


def test_list_exists_stat() -> None:
    ws = Workspace()
    ws.mkdir("a/b", recursive=True)
    ws.write("a/b/c.txt", "abc", now=3)
    assert [(e.path, e.type) for e in ws.list_dir("/workspace", recursive=True)] == [
        ("/workspace/a", "directory"),
        ("/workspace/a/b", "directory"),
        ("/workspace/a/b/c.txt", "file"),
    ]
    assert [e.path for e in ws.list_dir("a")] == ["/workspace/a/b"]
    assert err(ws.list_dir, "x") == ("ENOENT", "No such directory: x")
    assert err(ws.list_dir, "a/b/c.txt") == ("ENOTDIR", "Not a directory: a/b/c.txt")
    assert ws.exists("/workspace") and ws.exists("a/b") and not ws.exists("a/b/c.txt/x")
    assert not ws.exists("/etc")
    assert ws.stat("a").updated_at == 0 and ws.stat("a/b/c.txt").size == 3


def _engine_copy(ws: Workspace) -> tuple[VirtualFS, Hashable]:
    engine = VirtualFS(GUEST_LIMITS)
    update, version = ws.update_since(None)
    assert update.replace
    engine.update(update)
    return engine, version


def test_an_engine_copy_is_sent_only_what_changed_since_its_version() -> None:
    ws = Workspace()
    ws.mkdir("a")
    ws.write("a/f", "1", now=1)
    engine, version = _engine_copy(ws)
    assert engine.files() == {"a/f": b"1"}
    assert [path for path, _ in engine.walk()] == ["a", "a/f"]

    ws.write("b", "2", now=2)
    ws.delete("a", recursive=True)
    ws.mkdir("a")  # the same path again, now empty
    update, newer = ws.update_since(version)
    assert not update.replace
    assert {state.path: state.kind for state in update.states} == {
        "b": "file",
        "a": "directory",
        "a/f": "absent",
    }
    engine.update(update)
    assert engine.files() == {"b": b"2"} and engine.state("a").kind == "directory"

    nothing, same = ws.update_since(newer)
    assert nothing.states == () and same == newer
    # Another tree's version (the tree was re-read from the store), or none: the whole tree.
    assert Workspace.from_rows(ws.rows()).update_since(newer)[0].replace
    assert ws.update_since(None)[0].replace


def test_a_version_older_than_the_log_gets_the_whole_tree() -> None:
    ws = Workspace()
    _, version = ws.update_since(None)
    for index in range(LOG_PATHS + 1):
        ws.write("f", str(index), now=index)
    update, _ = ws.update_since(version)
    assert update.replace and [state.path for state in update.states] == ["f"]


def test_a_runs_changes_come_back_as_the_engine_left_them() -> None:
    ws = Workspace()
    ws.write("keep", "k", now=1)
    ws.write("old", "o", now=1)
    engine, _ = _engine_copy(ws)
    engine.begin()
    engine.mkdir(engine.resolve(engine.root, "d"))
    new = engine.create_file(engine.resolve(engine.root, "d/new"))
    engine.write(new, 0, b"fresh")
    engine.unlink(engine.resolve(engine.root, "old"))
    changes = engine.finish(keep=True)
    assert [(state.path, state.kind) for state in changes] == [
        ("old", "absent"),
        ("d", "directory"),
        ("d/new", "file"),
    ]
    applied = ws.apply_states(changes, now=7)
    assert {change.path for change in applied} == {
        "/workspace/old",
        "/workspace/d",
        "/workspace/d/new",
    }
    assert ws.read("d/new") == (b"fresh", 7) and not ws.exists("old") and ws.exists("keep")


def test_changes_that_break_a_limit_are_refused_whole() -> None:
    ws = Workspace()
    ws.write("a", "1", now=1)
    before = ws.rows()
    too_many = [PathState(f"f{index}", "file", b"x") for index in range(MAX_ENTRIES)]
    with pytest.raises(WorkspaceOSError) as entries:
        ws.apply_states(too_many, now=2)
    assert entries.value.errno == "ENOSPC" and ws.rows() == before
    with pytest.raises(WorkspaceOSError) as big:
        ws.apply_states([PathState("a", "file", bytes(MAX_FILE_BYTES + 1))], now=2)
    assert big.value.errno == "EFBIG" and ws.rows() == before
    for bad in ("", "../x", "a\0b"):
        with pytest.raises(WorkspaceOSError):
            ws.apply_states([PathState(bad, "directory")], now=2)
    assert ws.rows() == before


def test_rows_roundtrip() -> None:
    ws = Workspace()
    ws.mkdir("e")
    ws.write("f", b"\x01", now=4)
    again = Workspace.from_rows(ws.rows())
    assert again.rows() == ws.rows() and again.info() == ws.info()
