"""Synced files are read without following symlinks and never beyond the size limit,
even when the folder changes between the scan and the read."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.sync.conftest import remote_tree
from workbench.api import SandboxClient
from workbench.core.host_paths import HostPathError
from workbench.sync import MAX_FILE_BYTES, FolderSync, IgnoreRules
from workbench.sync import folder_sync as sync_engine
from workbench.sync import local as sync_local
from workbench.sync.local import LocalScan, read_regular_file, scan_folder
from workbench.sync.relative_paths import is_under, is_under_any

SECRET = b"outside the folder: must never reach the sandbox"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_bytes(SECRET)
    return path


def after_scan(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
    """Run `change` right after the sync's folder scan, before it reads the files."""

    def scan_then_change(root: Path, rules: IgnoreRules, start: str = "") -> LocalScan:
        scan = scan_folder(root, rules, start)
        change()
        return scan

    monkeypatch.setattr(sync_engine, "scan_folder", scan_then_change)


async def test_a_file_swapped_for_a_symlink_after_the_scan_is_not_followed(
    folder: Path, sandbox: SandboxClient, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (folder / "config.txt").write_text("harmless")
    (folder / "sub").mkdir()
    (folder / "sub" / "data.txt").write_text("harmless too")

    def swap() -> None:
        (folder / "config.txt").unlink()
        (folder / "config.txt").symlink_to(outside)
        (folder / "sub" / "data.txt").unlink()
        (folder / "sub").rmdir()
        (folder / "sub").symlink_to(outside.parent)  # a directory outside, same file name
        (outside.parent / "data.txt").write_bytes(SECRET)

    after_scan(monkeypatch, swap)
    report = await FolderSync(folder, sandbox).initial_sync()
    tree = await remote_tree(sandbox)
    assert SECRET not in tree.values()
    assert "config.txt" not in report.uploaded and "sub/data.txt" not in report.uploaded


async def test_a_file_that_grows_past_the_limit_after_the_scan_is_reported(
    folder: Path, sandbox: SandboxClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    (folder / "log.txt").write_text("small at scan time")
    after_scan(monkeypatch, lambda: (folder / "log.txt").write_bytes(b"x" * (MAX_FILE_BYTES + 5)))
    report = await FolderSync(folder, sandbox).initial_sync()
    assert [(issue.path, issue.code) for issue in report.errors] == [("log.txt", "FILE_TOO_LARGE")]
    assert "log.txt" not in await remote_tree(sandbox)


def test_read_regular_file_refuses_links_that_leave_the_folder(
    tmp_path: Path, outside: Path
) -> None:
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (root / "real" / "inner.txt").write_text("inside")
    (root / "to-outside").symlink_to(outside)
    (root / "dir-outside").symlink_to(outside.parent)
    (root / "to-inside").symlink_to(root / "real" / "inner.txt")
    (root / "dir-inside").symlink_to(root / "real")
    assert read_regular_file(root, "to-outside", 100) is None
    assert read_regular_file(root, "dir-outside/secret.txt", 100) is None
    assert read_regular_file(root, "to-inside", 100) == b"inside"
    assert read_regular_file(root, "dir-inside/inner.txt", 100) == b"inside"
    assert read_regular_file(root, "real", 100) is None  # a directory
    assert read_regular_file(root, "missing", 100) is None
    for bad in ("../secret.txt", "/etc/hostname", "real/../../secret.txt", "a\0b"):
        with pytest.raises(HostPathError):
            read_regular_file(root, bad, 100)


def test_read_regular_file_reads_at_most_one_byte_past_the_limit(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(os.urandom(10_000))
    assert len(read_regular_file(tmp_path, "big.bin", 99) or b"") == 100
    assert len(read_regular_file(tmp_path, "big.bin", 10_000) or b"") == 10_000


def test_read_regular_file_does_not_block_on_a_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    result: list[bytes | None] = []
    reader = threading.Thread(
        target=lambda: result.append(read_regular_file(tmp_path, "pipe", 100)), daemon=True
    )
    reader.start()
    reader.join(timeout=5)
    assert not reader.is_alive() and result == [None]


def linked_project(folder: Path) -> None:
    """`a` with a file and a subdirectory, and `b`, a link to `a`."""
    (folder / "a" / "sub").mkdir(parents=True)
    (folder / "a" / "f.txt").write_text("one")
    (folder / "a" / "sub" / "g.txt").write_text("deep")
    (folder / "b").symlink_to("a")


def copies(files: dict[str, bytes]) -> dict[str, bytes | None]:
    """The sandbox's tree when `a` holds `files` and `b` is a link to it."""
    tree: dict[str, bytes | None] = {"a": None, "a/sub": None, "b": None, "b/sub": None}
    for name, data in files.items():
        tree[f"a/{name}"] = tree[f"b/{name}"] = data
    return tree


async def test_a_link_to_a_directory_in_the_folder_is_a_copy_whichever_pass_finds_it(
    folder: Path, sandbox: SandboxClient
) -> None:
    """A full scan took what `b` leads to once, under whichever of `a` and `b` it met
    first (`a` stayed an empty directory), while a pass over `a` took it as `a`; and a
    change under `a`, which the watcher reports as `a`'s only, left `b`'s copy stale."""
    linked_project(folder)
    sync = FolderSync(folder, sandbox)
    await sync.initial_sync()
    files = {"f.txt": b"one", "sub/g.txt": b"deep"}
    assert await remote_tree(sandbox) == copies(files)
    (folder / "a" / "f.txt").write_text("two")
    (folder / "b" / "new.txt").write_text("new")
    report = await sync.sync_paths([folder / "a" / "f.txt", folder / "a" / "new.txt"])
    assert sorted(report.uploaded) == ["a/f.txt", "a/new.txt", "b/f.txt", "b/new.txt"]
    files |= {"f.txt": b"two", "new.txt": b"new"}
    assert await remote_tree(sandbox) == copies(files)
    (folder / "b" / "sub" / "g.txt").unlink()  # reported through the link this time
    report = await sync.sync_paths(["b/sub/g.txt"])
    assert sorted(report.deleted) == ["a/sub/g.txt", "b/sub/g.txt"]
    del files["sub/g.txt"]
    assert await remote_tree(sandbox) == copies(files)
    assert not (await sync.sync_all()).changed  # a full pass agrees


def test_a_link_to_a_directory_that_holds_it_is_skipped(tmp_path: Path) -> None:
    """A link to its own directory or one above it was listed as an empty directory."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f.txt").write_text("f")
    (tmp_path / "a" / "up").symlink_to("..")
    (tmp_path / "a" / "self").symlink_to(".")
    for start in ("", "a"):
        scan = scan_folder(tmp_path, IgnoreRules(tmp_path), start)
        assert set(scan.entries) == {"a", "a/f.txt"}
        assert sorted((notice.path, notice.code) for notice in scan.notices) == [
            ("a/self", "SYMLINK_SKIPPED"),
            ("a/up", "SYMLINK_SKIPPED"),
        ]


def test_a_scan_of_a_part_takes_nothing_through_a_link_the_whole_scan_skips(
    tmp_path: Path,
) -> None:
    """The watcher follows a link out of the folder (or to one that holds it) and reports
    paths under it: a scan of such a path took them (QA: the folders beside the watched
    one were made in the sandbox, and its own files uploaded again under `up/`)."""
    folder = tmp_path / "project"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "f.txt").write_text("f")
    (folder / "up").symlink_to("..")
    (folder / "a" / "self").symlink_to(".")
    (tmp_path / "private" / "deeper").mkdir(parents=True)
    (tmp_path / "private" / "secret.txt").write_bytes(SECRET)
    rules = IgnoreRules(folder)
    for start in ("up/private", "up/private/secret.txt", "up/project/a/f.txt", "a/self/f.txt"):
        scan = scan_folder(folder, rules, start)
        assert not scan.entries, start
    assert set(scan_folder(folder, rules, "a").entries) == {"a", "a/f.txt"}
    (folder / "inner").symlink_to("a")  # a link that stays inside is still followed
    assert set(scan_folder(folder, rules, "inner/f.txt").entries) == {"inner/f.txt"}


async def test_a_pass_over_paths_under_a_link_out_of_the_folder_syncs_nothing(
    folder: Path, sandbox: SandboxClient
) -> None:
    (folder / "a.py").write_text("x = 1")
    (folder / "up").symlink_to("..")
    (folder.parent / "private").mkdir()
    (folder.parent / "private" / "secret.txt").write_bytes(SECRET)
    sync = FolderSync(folder, sandbox)
    await sync.initial_sync()
    assert await remote_tree(sandbox) == {"a.py": b"x = 1"}
    report = await sync.sync_paths(
        [folder / "up" / "private" / "secret.txt", folder / "up" / "project" / "a.py"]
    )
    assert not report.changed
    assert await remote_tree(sandbox) == {"a.py": b"x = 1"}


async def test_a_link_reached_through_another_is_decided_as_the_whole_scan_does(
    folder: Path, sandbox: SandboxClient
) -> None:
    """`app/lib` -> `shared/sub`, and in it `l` -> `..` (`shared`): the whole scan takes
    `app/lib/l` (it did not come through `shared`), so a pass over a change in `shared`
    updates that copy too. Found in review: a pass skipped it (its copy stayed stale),
    then, deciding by name alone, led on through `l/sub/l/…` to a name too long to stat,
    which ended the watch."""
    (folder / "shared" / "sub").mkdir(parents=True)
    (folder / "app").mkdir()
    (folder / "shared" / "f.txt").write_text("old")
    (folder / "shared" / "sub" / "l").symlink_to("..")
    (folder / "app" / "lib").symlink_to("../shared/sub")
    assert "app/lib/l/f.txt" in scan_folder(folder, IgnoreRules(folder)).entries
    part = scan_folder(folder, IgnoreRules(folder), "app/lib/l/f.txt")
    assert set(part.entries) == {"app/lib/l/f.txt"}
    sync = FolderSync(folder, sandbox)
    await sync.initial_sync()
    (folder / "shared" / "f.txt").write_text("new")
    report = await sync.sync_paths([folder / "shared" / "f.txt"])
    assert sorted(report.uploaded) == ["app/lib/l/f.txt", "shared/f.txt"]
    assert not (await sync.sync_all()).changed


def test_links_that_fan_out_are_followed_to_a_bound(tmp_path: Path) -> None:
    """Two links to the next level at each of 16 levels lead to 2^16 paths: the scan
    takes what it can of them whole, skips each link whose copy does not fit whole, and
    says so; every real entry is there."""
    real = set()
    for level in range(16):
        (tmp_path / f"d{level}").mkdir()
        (tmp_path / f"d{level}" / "f.txt").write_text(str(level))
        real |= {f"d{level}", f"d{level}/f.txt"}
        if level:
            for name in ("x", "y"):
                (tmp_path / f"d{level - 1}" / name).symlink_to(f"../d{level}")
    scan = scan_folder(tmp_path, IgnoreRules(tmp_path))
    assert real <= set(scan.entries) and len(scan.entries) <= len(real) + 8_192
    assert scan.cut_links and {notice.code for notice in scan.notices} == {"SYMLINK_SKIPPED"}
    assert {notice.path for notice in scan.notices} == scan.cut_links
    for link in scan.links:  # a copy taken is whole: as deep as its directory goes
        assert link in scan.entries and f"{link}/f.txt" in scan.entries
    assert not any(is_under_any(path, scan.cut_links) for path in scan.entries)


def test_many_links_to_one_large_directory_are_scanned_in_bounded_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """500 links to a directory of 2,000 files: the scan went on listing and stat'ing
    every copy after the bound (1.25 million stats, 21 s), and left most links as empty
    directories without a word (found by a review). Now it stops taking copies at the
    bound, skips the links it could not take whole, and says so for each."""
    shared = tmp_path / "shared"
    shared.mkdir()
    for number in range(2_000):
        (shared / f"f{number}").write_text("")
    for number in range(500):
        (tmp_path / f"link{number:03}").symlink_to("shared")
    looked_at = 0
    original = sync_local._entry_for

    def counted(*args: Any) -> Any:
        nonlocal looked_at
        looked_at += 1
        return original(*args)

    monkeypatch.setattr(sync_local, "_entry_for", counted)
    scan = scan_folder(tmp_path, IgnoreRules(tmp_path))
    assert looked_at <= 2_501 + 8_192 + 2 * 500
    copied = {link for link in scan.links if link.startswith("link")}
    assert copied and len(copied) + len(scan.cut_links) == 500
    assert {notice.path for notice in scan.notices} == scan.cut_links
    for link in copied:
        assert sum(is_under(path, link) for path in scan.entries) == 2_001


def test_a_scan_of_a_part_skips_the_links_the_whole_scan_cut(tmp_path: Path) -> None:
    """A scan of one path took a link's copy that the scan of the whole folder had cut,
    and the next full pass deleted it again, at every change (found by a review)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    for number in range(3_000):
        (shared / f"f{number}").write_text("")
    for name in ("a", "b", "c", "d"):
        (tmp_path / name).symlink_to("shared")
    whole = scan_folder(tmp_path, IgnoreRules(tmp_path))
    assert whole.cut_links == {"c", "d"}
    for start in ("d", "d/f7"):
        part = scan_folder(tmp_path, IgnoreRules(tmp_path), start, cut_links=whole.cut_links)
        assert not part.entries and part.cut_links == {"d"}
    assert len(scan_folder(tmp_path, IgnoreRules(tmp_path), "d").entries) == 3_001


async def test_links_cut_by_the_bound_stay_cut_between_full_passes(
    folder: Path, sandbox: SandboxClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass over a changed path took the copies the full pass had cut, and the next
    full pass deleted them again, at every change (found by a review)."""
    monkeypatch.setattr(sync_local, "_LINKED_ENTRIES", 12)
    (folder / "shared").mkdir()
    for number in range(5):
        (folder / "shared" / f"f{number}").write_text(str(number))
    for name in ("a", "b", "c"):
        (folder / name).symlink_to("shared")
    sync = FolderSync(folder, sandbox)
    first = await sync.initial_sync()
    assert sorted(notice.path for notice in first.notices) == ["b", "c"]
    (folder / "shared" / "f1").write_text("changed")
    report = await sync.sync_paths([folder / "shared" / "f1", folder / "b" / "f1"])
    assert sorted(report.uploaded) == ["a/f1", "shared/f1"]
    assert not (await sync.sync_all()).changed
    tree = await remote_tree(sandbox)
    assert sorted(path for path in tree if "/" not in path) == ["a", "shared"]
