"""No id or path from outside picks a host location (issue 11, item 1).

Sandbox ids such as `..` and `.` are valid (spec 8.1); a sandbox has no host directory at
all (its files live in SQLite and in its engines' memory), so running and destroying them
must leave every host directory as it was.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.backends.local import open_local_backend
from workbench.core.host_paths import HostPathError, host_path, opaque_name
from workbench.core.paths import WorkspaceOSError, normalize
from workbench.paths import DATABASE_NAME
from workbench.protocol.ids import SANDBOX_ID_PATTERN, sandbox_id_error

ROOT = Path("/nonexistent/root")


def _inside(root: Path, candidate: Path) -> bool:
    resolved = Path(os.path.normpath(candidate))
    return resolved != root and root in resolved.parents


@given(st.from_regex(SANDBOX_ID_PATTERN, fullmatch=True))
def test_every_valid_sandbox_id_maps_to_its_own_directory_below_the_root(sandbox_id: str) -> None:
    directory = host_path(ROOT, opaque_name(sandbox_id))
    assert directory.parent == ROOT
    assert re.fullmatch(r"[0-9a-f]{32}", directory.name)


@given(st.text())
def test_any_relative_name_is_refused_or_stays_inside(relative: str) -> None:
    try:
        joined = host_path(ROOT, relative)
    except HostPathError:
        return
    assert _inside(ROOT, joined)


@given(
    st.lists(
        st.sampled_from(["a", "/", ".", "..", "\0", "b/", "/workspace", "é"]), max_size=12
    ).map("".join)
)
def test_workspace_paths_normalize_inside_the_root_or_are_refused(raw: str) -> None:
    try:
        normalized = normalize(raw)
    except WorkspaceOSError:
        return
    if normalized.is_root:
        return
    try:
        joined = host_path(ROOT, normalized.relative)
    except HostPathError:
        # Only a NUL survives normalization; it must never reach the host.
        assert "\0" in normalized.relative
        return
    assert _inside(ROOT, joined)


@pytest.mark.parametrize("relative", ["..", ".", "a/../..", "/etc", "a//b", "a/./b", "x\0y", ""])
def test_path_tricks_are_refused(relative: str) -> None:
    with pytest.raises(HostPathError):
        host_path(ROOT, relative)


@settings(max_examples=50)
@given(st.text(max_size=70))
def test_opaque_names_accept_any_text(key: str) -> None:
    assert host_path(ROOT, opaque_name(key)).parent == ROOT


@pytest.mark.parametrize("sandbox_id", ["..", "."])
async def test_dot_ids_run_and_are_destroyed_without_touching_the_host(
    tmp_path: Path, sandbox_id: str, perl_engine: None
) -> None:
    assert sandbox_id_error(sandbox_id) is None  # valid under spec 8.1, and must stay so
    data = tmp_path / "work" / "data"
    neighbour = tmp_path / "work" / "neighbour"
    neighbour.mkdir(parents=True)
    (neighbour / "keep.txt").write_text("not the sandbox's")
    backend = open_local_backend(data, embedded=True)
    other = backend.sandbox("other")
    await other.write_file("mine.txt", "other sandbox")
    ok = await other.interpreter.run_code("1", binding="PERL")
    assert ok.error is None
    host_before = _host_tree(tmp_path)
    try:
        sandbox = backend.sandbox(sandbox_id)
        await sandbox.write_file("a.txt", "dot")
        result = await sandbox.interpreter.run_code(
            'open(my $f, "<", "a.txt") or die; my $t = <$f>; opendir(my $d, ".") or die;'
            ' open(my $o, ">", "../escape.txt") and print $o "out";'
            ' join(",", sort grep { !/^\\./ } readdir($d)) . ":" . $t',
            binding="PERL",
        )
        assert result.error is None, result.error
        assert result.results[0].text == "a.txt:dot"  # not the other sandbox's files
        await sandbox.destroy()
        assert _host_tree(tmp_path) == host_before  # the store's own files aside
        assert (neighbour / "keep.txt").read_text() == "not the sandbox's"
        assert (await other.read_file("mine.txt")).content == "other sandbox"
        listing = await other.interpreter.run_code(
            'opendir(my $d, ".") or die; join(",", sort grep { !/^\\./ } readdir($d))',
            binding="PERL",
        )
        assert listing.results[0].text == "mine.txt"
    finally:
        await backend.aclose()


def _host_tree(root: Path) -> set[str]:
    """Every path below `root`, but the store's database files (which change)."""
    return {
        str(path.relative_to(root))
        for path in root.rglob("*")
        if not path.name.startswith(DATABASE_NAME)
    }
