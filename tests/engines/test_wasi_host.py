"""Our WASI 0.2 host (engines.decomposed.wasi), on its own and under the real Python guest:
confinement to the mounts (`..`, symlinks, absolute paths), no links, denied sockets,
waits that end when an execution is interrupted, and host state that is checked JSON."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import wasmtime

from engines.decomposed.wasi.abi import GuestMemory, GuestTrap
from engines.decomposed.wasi.confine import Resolved, resolve
from engines.decomposed.wasi.errors import FsError, WasiErrno, error_code
from engines.decomposed.wasi.host import Mount, WasiHost
from engines.host import make_engine, new_store
from engines.session import Boot, Limits, Session
from tests.conftest import require_engine
from tests.engines.python_harness import Guest, Prepared, prepare_component

SECRET = "host secret"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A mount with every kind of link that could lead out of it, and a secret outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    root = tmp_path / "workspace"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "file.txt").write_text("inside")
    (root / "absolute").symlink_to(outside)
    (root / "absolute_file").symlink_to(outside / "secret.txt")
    (root / "climbing").symlink_to("../outside")
    (root / "sub" / "parent").symlink_to("..")
    (root / "chain").symlink_to("sub/file.txt")
    (root / "loop_a").symlink_to("loop_b")
    (root / "loop_b").symlink_to("loop_a")
    return root


def _resolve(root: Path, path: str, *, follow: bool = True, start: str = "") -> Resolved:
    directory = os.open(root / start, os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = resolve(directory, [part for part in start.split("/") if part], path, follow=follow)
    finally:
        os.close(directory)
    found.close()
    return found


def _refused(root: Path, path: str, *, follow: bool = True, start: str = "") -> WasiErrno:
    """The error the guest would see (the walk raises the kernel's errors as they are)."""
    with pytest.raises((FsError, OSError)) as refused:
        _resolve(root, path, follow=follow, start=start)
    return error_code(refused.value)


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "absolute/secret.txt",
        "absolute_file",
        "climbing/secret.txt",
        "sub/parent/..",
        "sub/parent/../outside/secret.txt",
    ],
)
def test_paths_out_of_the_mount_are_not_permitted(tree: Path, path: str) -> None:
    assert _refused(tree, path) == WasiErrno.NOTPERM


def test_dotdot_never_leaves_the_descriptor_a_path_starts_from(tree: Path) -> None:
    """As with cap-std: a directory descriptor is its own sandbox, even inside a mount."""
    assert _refused(tree, "..", start="sub") == WasiErrno.NOTPERM
    assert _refused(tree, "parent/sub", start="sub") == WasiErrno.NOTPERM
    assert _resolve(tree, "file.txt", start="sub").path == "sub/file.txt"


def test_links_inside_the_mount_are_followed_physically(tree: Path) -> None:
    assert _resolve(tree, "chain").path == "sub/file.txt"
    assert _resolve(tree, "sub/parent/sub/file.txt").path == "sub/file.txt"
    assert _resolve(tree, "sub/./file.txt").path == "sub/file.txt"
    assert _resolve(tree, "sub/").path == "sub"
    # Not following the final component names the link itself (operated on with *at calls
    # that do not follow it either).
    unfollowed = _resolve(tree, "absolute_file", follow=False)
    assert (unfollowed.path, unfollowed.name) == ("absolute_file", "absolute_file")


def test_symlink_loops_and_bad_names_are_errors(tree: Path) -> None:
    assert _refused(tree, "loop_a") == WasiErrno.LOOP
    assert _refused(tree, "loop_a/x") == WasiErrno.LOOP
    assert _refused(tree, "") == WasiErrno.NOENT
    assert _refused(tree, "sub/\0x") == WasiErrno.INVAL
    assert _refused(tree, "sub/file.txt/x") == WasiErrno.NOTDIR


# --- under the real Python guest ---------------------------------------------------------


@pytest.fixture(scope="module")
def prepared() -> Iterator[Prepared]:
    require_engine("python")
    yield prepare_component()


@pytest.fixture
def guest(prepared: Prepared, tree: Path) -> Iterator[Guest]:
    live = Guest(prepared, tree)
    yield live
    live.close()


@pytest.mark.parametrize(
    "code",
    [
        "open('/workspace/climbing/secret.txt').read()",
        "open('/workspace/absolute/secret.txt').read()",
        "open('/workspace/absolute_file').read()",
        "open('/workspace/sub/../../outside/secret.txt').read()",
        "open('/workspace/sub/parent/../outside/secret.txt').read()",
        "import os\nos.listdir('/workspace/climbing')",
        "open('/workspace/climbing/new.txt', 'w').write('x')",
        "import os\nos.rename('/workspace/sub/file.txt', '/workspace/climbing/moved.txt')",
        "open('/workspace/loop_a').read()",
    ],
)
def test_the_guest_cannot_leave_its_workspace(guest: Guest, tree: Path, code: str) -> None:
    run = guest.run(code, session=True)
    assert run.error is not None, code
    assert run.error.name in {"PermissionError", "FileNotFoundError", "OSError"}, run.error
    assert SECRET not in run.stdout + run.stderr + run.error.message
    assert sorted(path.name for path in (tree.parent / "outside").iterdir()) == ["secret.txt"]
    assert (tree / "sub" / "file.txt").read_text() == "inside"


def test_the_guest_follows_links_that_stay_inside(guest: Guest) -> None:
    code = "import os\n(open('chain').read(), sorted(os.listdir('sub/parent/sub')))"
    assert guest.run(code, session=True).text == "('inside', ['file.txt', 'parent'])"


def test_the_guest_cannot_create_links(guest: Guest, tree: Path) -> None:
    for code in ("os.symlink('sub/file.txt', 'made')", "os.link('sub/file.txt', 'made')"):
        run = guest.run(f"import os\n{code}", session=True)
        assert run.error is not None and run.error.name == "PermissionError", code
    assert not os.path.lexists(tree / "made")


def test_readlink_never_shows_a_host_path(guest: Guest) -> None:
    assert guest.run("import os\nos.readlink('chain')", session=True).text == "'sub/file.txt'"
    run = guest.run("import os\nos.readlink('absolute')", session=True)
    assert run.error is not None and run.error.name == "PermissionError"
    assert "outside" not in run.error.message


def test_sockets_and_name_lookup_are_denied_like_wasmtime(guest: Guest) -> None:
    run = guest.run("import socket\nsocket.socket()", session=True)
    assert run.error is not None
    assert (run.error.name, run.error.message) == ("PermissionError", "[Errno 2] Permission denied")
    run = guest.run("import socket\nsocket.getaddrinfo('example.com', 80)", session=True)
    assert run.error is not None
    assert (run.error.name, run.error.message) == ("gaierror", "[Errno -4] Non-recoverable error")


def test_the_environment_is_empty_and_stdio_is_captured(guest: Guest) -> None:
    run = guest.run(
        "import os, sys\nprint('out')\nprint('err', file=sys.stderr)\nlen(os.environ)",
        session=True,
    )
    assert (run.text, run.stdout, run.stderr) == ("0", "out\n", "err\n")
    assert guest.output.writes == 2


# --- waits end when the execution is interrupted ------------------------------------------


@pytest.mark.parametrize(
    "code", ["import time\ntime.sleep(30)", "import select\nselect.select([], [], [], 30)"]
)
def test_a_blocking_wait_wakes_when_cancelled(tmp_path: Path, code: str) -> None:
    """In process, without an engine process to end: the host's wait itself wakes up and
    the guest traps at its next epoch check."""
    require_engine("python")
    with Session("python", workspace=tmp_path, limits=Limits(timeout_seconds=60)) as live:
        live.execute("kept = 41")
        live.take_snapshot()
        timer = threading.Timer(0.3, live.cancel)
        timer.start()
        started = time.monotonic()
        outcome = live.execute(code)
        timer.join()
        assert time.monotonic() - started < 2
        assert outcome.result.error is not None
        assert outcome.result.error.message == "Execution cancelled"
        after = live.execute("kept + 1")
        assert after.boot is Boot.RESTORED
        assert [entry.text for entry in after.result.results] == ["42"]


def test_a_blocking_wait_wakes_at_the_deadline(tmp_path: Path) -> None:
    require_engine("python")
    with Session("python", workspace=tmp_path, limits=Limits(timeout_seconds=0.5)) as live:
        started = time.monotonic()
        outcome = live.execute("import time\ntime.sleep(30)")
        assert time.monotonic() - started < 2
        assert outcome.result.error is not None
        assert outcome.result.error.message == "Execution timed out after 0.5 s"


def test_a_wait_returns_at_once_when_woken(tmp_path: Path) -> None:
    wake = threading.Event()
    host = WasiHost(mounts=[], stdout=print, stderr=print, wake=wake)
    try:
        far = host.monotonic() + 60 * 10**9
        threading.Timer(0.2, wake.set).start()
        started = time.monotonic()
        assert host.wait([far, far]) == [0]
        assert 0.15 < time.monotonic() - started < 2
        soon = host.monotonic() + 10**6
        assert host.wait([far, soon, None]) == [2]
    finally:
        host.close()


# --- host state and guest memory ------------------------------------------------------------


def _host(tmp_path: Path) -> WasiHost:
    return WasiHost(mounts=[Mount(tmp_path, "/workspace", True)], stdout=print, stderr=print)


def test_host_state_round_trips_through_json(tmp_path: Path) -> None:
    host = _host(tmp_path)
    descriptor = {"type": "descriptor", "preopen": 0, "path": "", "dir": True, "flags": 33}
    first = host.add(descriptor)
    host.add({"type": "pollable", "deadline": None})
    host.drop(first, "descriptor")
    state = json.loads(json.dumps(host.state()))
    other = _host(tmp_path)
    other.load(state)
    assert other.table.entries == host.table.entries
    assert other.add({"type": "network"}) == first  # freed handles are reused
    assert other.monotonic() >= state["clock"]
    host.close()
    other.close()


@pytest.mark.parametrize(
    "table",
    [
        {"next": 2, "free": [], "entries": {"1": {"type": "socket"}}},
        {"next": 2, "free": [], "entries": {"1": {"type": "pollable", "deadline": "soon"}}},
        {"next": 2, "free": [], "entries": {"1": {"type": "pollable", "deadline": None, "x": 1}}},
        {"next": 1, "free": [], "entries": {"1": {"type": "network"}}},
        {"next": 3, "free": [1], "entries": {"1": {"type": "network"}}},
        {"next": 2, "free": [], "entries": {"one": {"type": "network"}}},
        {"garbage": "yes"},
    ],
)
def test_malformed_host_state_is_refused(tmp_path: Path, table: object) -> None:
    host = _host(tmp_path)
    with pytest.raises(ValueError):
        host.load({"table": table, "clock": 1})
    host.close()


def test_guest_pointers_are_bounds_checked() -> None:
    store = new_store(make_engine(), memory_bytes=1 << 20)
    memory = wasmtime.Memory(store, wasmtime.MemoryType(wasmtime.Limits(1, 2)))
    guest_memory = GuestMemory(store, memory)
    guest_memory.write(65532, b"abcd")
    assert guest_memory.read(65532, 4) == b"abcd"
    for pointer, length in ((65533, 4), (-1, 1), (1 << 31, 1)):
        with pytest.raises(GuestTrap, match="out of bounds"):
            guest_memory.read(pointer, length)
    guest_memory.write(0, b"\xff\xfe")
    with pytest.raises(GuestTrap, match="UTF-8"):
        guest_memory.string(0, 2)
