"""`engines.vfs`: the guest's `/workspace` in memory, its limits on every operation, and a
run's changes kept or taken back."""

from __future__ import annotations

import pytest

from engines.vfs import (
    Directory,
    File,
    PathState,
    TreeUpdate,
    VfsError,
    VfsLimits,
    VirtualFS,
)

SMALL = VfsLimits(file_bytes=100, total_bytes=250, entries=6, name_bytes=8, path_bytes=20)


def errno_of(action: object, *args: object) -> str:
    with pytest.raises(VfsError) as raised:
        action(*args)  # type: ignore[operator]
    return raised.value.errno


def new_file(fs: VirtualFS, path: str, data: bytes = b"") -> File:
    file = fs.create_file(fs.resolve(fs.root, path))
    fs.write(file, 0, data)
    return file


def test_a_write_past_the_file_limit_is_efbig_and_changes_nothing() -> None:
    fs = VirtualFS(SMALL)
    file = new_file(fs, "f", b"x" * 60)
    assert errno_of(fs.write, file, 50, b"y" * 51) == "EFBIG"
    assert errno_of(fs.truncate, file, 101) == "EFBIG"
    assert bytes(file.data) == b"x" * 60 and fs.total_bytes == 60
    assert fs.write(file, 60, b"z" * 40) == 40 and len(file.data) == 100


def test_the_total_and_the_entries_are_bounded() -> None:
    fs = VirtualFS(SMALL)
    first, second = new_file(fs, "a", b"1" * 100), new_file(fs, "b", b"2" * 100)
    third = new_file(fs, "c")
    assert errno_of(fs.write, third, 0, b"3" * 51) == "ENOSPC"
    assert fs.total_bytes == 200 and not third.data
    fs.truncate(first, 10)  # shrinking frees room
    assert fs.write(third, 0, b"3" * 90) == 90
    assert (first.data, len(second.data)) == (bytearray(b"1" * 10), 100)
    fs.mkdir(fs.resolve(fs.root, "d"))
    new_file(fs, "d/e")
    new_file(fs, "d/f")
    assert fs.entries == SMALL.entries
    assert errno_of(fs.mkdir, fs.resolve(fs.root, "g")) == "ENOSPC"
    assert errno_of(fs.create_file, fs.resolve(fs.root, "d/g")) == "ENOSPC"


def test_names_and_paths_are_bounded_and_utf8() -> None:
    fs = VirtualFS(SMALL)
    assert errno_of(fs.mkdir, fs.resolve(fs.root, "n" * 9)) == "ENAMETOOLONG"
    fs.mkdir(fs.resolve(fs.root, "a" * 8))
    fs.mkdir(fs.resolve(fs.root, "a" * 8 + "/" + "b" * 8))  # 17 bytes
    assert errno_of(fs.mkdir, fs.resolve(fs.root, "a" * 8 + "/" + "b" * 8 + "/ccc")) == (
        "ENAMETOOLONG"
    )
    assert errno_of(fs.create_file, fs.resolve(fs.root, "bad\udcff")) == "EILSEQ"
    assert errno_of(fs.resolve, fs.root, "a\0b") == "EINVAL"


def test_a_rename_keeps_every_moved_path_within_the_limit() -> None:
    fs = VirtualFS(SMALL)
    fs.mkdir(fs.resolve(fs.root, "d"))
    fs.mkdir(fs.resolve(fs.root, "d/inner"))
    new_file(fs, "d/inner/f")  # "d/inner/f": 9 bytes
    deep = fs.lookup(fs.root, "d/inner")
    assert isinstance(deep, Directory)
    assert errno_of(fs.rename, fs.resolve(fs.root, "d"), fs.resolve(deep, "ddddddd")) == "EINVAL"
    fs.mkdir(fs.resolve(fs.root, "longname"))
    target = fs.resolve(fs.root, "longname/dddddddd")  # would make a 27-byte path below
    assert errno_of(fs.rename, fs.resolve(fs.root, "d"), target) == "ENAMETOOLONG"
    assert fs.files() == {"d/inner/f": b""}


def test_nothing_leaves_the_directory_a_path_starts_from() -> None:
    fs = VirtualFS()
    fs.mkdir(fs.resolve(fs.root, "sub"))
    sub = fs.lookup(fs.root, "sub")
    assert isinstance(sub, Directory)
    for path in ("/etc/passwd", "..", "../x", "sub/../../x"):
        assert errno_of(fs.resolve, fs.root, path) == "EPERM", path
    assert errno_of(fs.resolve, sub, "..") == "EPERM"  # not above where a path starts
    assert fs.resolve(fs.root, "sub/../sub/.").node is sub
    fs.rmdir(fs.resolve(fs.root, "sub"))
    assert errno_of(fs.resolve, sub, "x") == "ENOENT"  # a removed directory holds nothing


def test_bytes_of_a_file_unlinked_while_open_count_until_it_is_closed() -> None:
    fs = VirtualFS(SMALL)
    held = []
    for index in range(2):
        file = new_file(fs, f"f{index}", b"x" * 100)
        fs.retain(file)
        fs.unlink(fs.resolve(fs.root, f"f{index}"))
        held.append(file)
    assert fs.files() == {} and fs.entries == 0 and fs.total_bytes == 200
    lone = new_file(fs, "g")
    assert errno_of(fs.write, lone, 0, b"y" * 51) == "ENOSPC"
    fs.truncate(held[0], 50)  # writes through the handle still count
    assert fs.total_bytes == 150
    fs.release(held[0])
    assert fs.total_bytes == 100
    fs.release(held[1])
    assert fs.total_bytes == 0


def test_a_file_replaced_by_a_rename_while_open_counts_until_closed() -> None:
    fs = VirtualFS(SMALL)
    old = new_file(fs, "a", b"o" * 100)
    fs.retain(old)
    new_file(fs, "b", b"n" * 100)
    fs.rename(fs.resolve(fs.root, "b"), fs.resolve(fs.root, "a"))
    assert fs.files() == {"a": b"n" * 100} and fs.total_bytes == 200
    fs.release(old)
    assert fs.total_bytes == 100


def test_rename_follows_posix() -> None:
    fs = VirtualFS()
    fs.mkdir(fs.resolve(fs.root, "d"))
    fs.mkdir(fs.resolve(fs.root, "e"))
    new_file(fs, "e/x")
    new_file(fs, "f", b"1")
    assert errno_of(fs.rename, fs.resolve(fs.root, "f"), fs.resolve(fs.root, "d")) == "EISDIR"
    assert errno_of(fs.rename, fs.resolve(fs.root, "d"), fs.resolve(fs.root, "f")) == "ENOTDIR"
    assert errno_of(fs.rename, fs.resolve(fs.root, "d"), fs.resolve(fs.root, "e")) == "ENOTEMPTY"
    assert errno_of(fs.rename, fs.resolve(fs.root, "gone"), fs.resolve(fs.root, "g")) == "ENOENT"
    fs.rename(fs.resolve(fs.root, "e"), fs.resolve(fs.root, "d"))  # over an empty directory
    assert fs.files() == {"d/x": b"", "f": b"1"} and fs.entries == 3


def test_a_kept_run_reports_only_what_differs() -> None:
    fs = VirtualFS()
    fs.update(TreeUpdate((PathState("same", "file", b"s"), PathState("d/old", "file", b"o"))))
    fs.begin()
    same = fs.lookup(fs.root, "same")
    assert isinstance(same, File)
    fs.write(same, 0, b"s")  # rewritten with the same bytes
    fs.rename(fs.resolve(fs.root, "d"), fs.resolve(fs.root, "moved"))
    fs.mkdir(fs.resolve(fs.root, "d"))
    temporary = new_file(fs, "tmp", b"t")
    fs.unlink(fs.resolve(fs.root, "tmp"))
    del temporary
    changes = fs.finish(keep=True)
    assert [(state.path, state.kind) for state in changes] == [
        ("d/old", "absent"),
        ("moved", "directory"),
        ("moved/old", "file"),
    ]


def test_a_failed_run_is_taken_back_whole() -> None:
    fs = VirtualFS()
    fs.update(
        TreeUpdate(
            (
                PathState("keep", "file", b"before", 1_000),
                PathState("dir/inner", "file", b"i"),
                PathState("gone", "file", b"g"),
            )
        )
    )
    before = fs.files()
    keep = fs.lookup(fs.root, "keep")
    assert isinstance(keep, File)
    fs.retain(keep)  # a handle from an earlier run
    fs.begin()
    fs.write(keep, 0, b"AFTER!!")
    fs.rename(fs.resolve(fs.root, "dir"), fs.resolve(fs.root, "renamed"))
    new_file(fs, "renamed/new", b"n")
    fs.unlink(fs.resolve(fs.root, "gone"))
    fs.mkdir(fs.resolve(fs.root, "fresh"))
    assert fs.finish(keep=False) == []
    assert fs.files() == before
    assert [path for path, _ in fs.walk()] == ["keep", "dir", "gone", "dir/inner"]
    assert fs.lookup(fs.root, "keep") is keep and bytes(keep.data) == b"before"
    assert keep.mtime_ns == 1_000 * 1_000_000
    assert fs.total_bytes == len(b"before") + 2 and fs.entries == 4


def test_a_moved_directory_taken_back_lists_its_entries_in_their_order() -> None:
    """The journal of a moved subtree is kept in the tree's order, so a rollback puts
    the entries back as they were listed (`x, y, z`, not `z, y, x`)."""
    fs = VirtualFS()
    fs.update(TreeUpdate(tuple(PathState(f"a/{name}", "file", b"1") for name in "xyz")))
    fs.begin()
    fs.rename(fs.resolve(fs.root, "a"), fs.resolve(fs.root, "b"))
    for name in "xyz":
        fs.unlink(fs.resolve(fs.root, f"b/{name}"))
    fs.finish(keep=False)
    directory = fs.lookup(fs.root, "a")
    assert directory is not None
    assert [name for name, _ in fs.listing(directory)] == ["x", "y", "z"]


def test_an_update_replaces_or_patches_the_tree() -> None:
    fs = VirtualFS()
    fs.update(TreeUpdate((PathState("a/b", "file", b"1"), PathState("c", "file", b"2"))))
    held = fs.lookup(fs.root, "c")
    fs.retain(held)
    fs.update(TreeUpdate((PathState("a", "absent"), PathState("c", "file", b"22"))))
    assert fs.files() == {"c": b"22"} and fs.lookup(fs.root, "c") is held  # same node
    fs.update(TreeUpdate((PathState("z", "directory"),), replace=True))
    assert [path for path, _ in fs.walk()] == ["z"] and fs.entries == 1
    assert fs.total_bytes == 2  # the open file still counts
    fs.release(held)
    assert fs.total_bytes == 0


def test_dev_null_reads_nothing_takes_writes_and_holds_nothing_else() -> None:
    devices = VirtualFS.devices()
    null = devices.lookup(devices.root, "null")
    assert devices.read(null, 0, 10) == b""
    assert devices.write(null, 0, b"gone") == 4  # type: ignore[arg-type]
    assert errno_of(devices.create_file, devices.resolve(devices.root, "x")) == "EPERM"
    assert errno_of(devices.mkdir, devices.resolve(devices.root, "d")) == "EPERM"
    assert errno_of(devices.unlink, devices.resolve(devices.root, "null")) == "EPERM"


def test_a_denied_tree_has_only_its_root_and_lists_nothing() -> None:
    """A deployment with the File API off (spec 6.7): every path below the root and every
    listing is EACCES; the root itself resolves, so it can stay the guest's cwd."""
    fs = VirtualFS(VfsLimits(denied=True))
    for path in ("a.txt", "./d/e", "..", "/workspace", "\0"):
        assert errno_of(fs.resolve, fs.root, path) == "EACCES", path
    assert fs.resolve(fs.root, ".").node is fs.root
    assert fs.resolve(fs.root, "./").node is fs.root
    assert errno_of(fs.listing, fs.root) == "EACCES"
    assert VirtualFS().listing(VirtualFS().root) == []
