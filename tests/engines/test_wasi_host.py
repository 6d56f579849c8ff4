"""Our WASI 0.2 host (engines.components.wasi), on its own and under the real Python guest:
confinement to the mounts (absolute paths, `..`), no links, denied sockets, waits that
end when an execution is interrupted, and host state that is checked JSON."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import wasmtime

from engines.components.wasi import filesystem
from engines.components.wasi.abi import Call, GuestMemory, GuestTrap
from engines.components.wasi.errors import WasiErrno
from engines.components.wasi.host import (
    DESCRIPTOR_READ,
    DESCRIPTOR_WRITE,
    MUTATE_DIRECTORY,
    WasiHost,
)
from engines.host import make_engine, new_store
from engines.result import Boot, Limits
from engines.session import Session
from engines.vfs import Mount, VirtualFS
from tests.conftest import require_engine
from tests.engines.prepared import entries, put_files
from tests.engines.python_harness import Guest, Prepared, prepare_component

SECRET = "host secret"
TREE = {"sub/file.txt": b"inside"}
RET, PATH, OTHER_PATH, HEAP = 0x40, 0x400, 0x800, 0x2000
"""Where results, path arguments and the guest allocator's blocks go in the bare memory."""


@pytest.fixture
def tree() -> VirtualFS:
    """The guest's workspace: one file in a subdirectory."""
    fs = VirtualFS()
    put_files(fs, TREE)
    return fs


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A host file next to where a host directory would be: no guest may reach it."""
    path = tmp_path / "secret.txt"
    path.write_text(SECRET)
    return path


class HostCalls:
    """The host's own `wasi:filesystem` imports on a bare guest memory, called with the
    arguments a guest passes (the mounts come from `get-directories`, as a guest gets them)."""

    def __init__(self, mounts: list[Mount]) -> None:
        self.store = new_store(make_engine(), memory_bytes=1 << 20)
        memory = wasmtime.Memory(self.store, wasmtime.MemoryType(wasmtime.Limits(2, 2)))
        self.host = WasiHost(mounts=mounts, stdout=print, stderr=print)
        self.host.attach(self.store, memory)
        self._heap = HEAP
        i32 = wasmtime.ValType.i32()
        realloc = wasmtime.Func(self.store, wasmtime.FuncType([i32] * 4, [i32]), self._realloc)
        self.call = Call(self.host, lambda: realloc)
        self.memory = self.call.memory
        filesystem.get_directories(self.call, RET)
        base, count = self.memory.unpack("II", RET)
        self.preopens: dict[str, int] = {}
        for index in range(count):
            handle, ptr, length = self.memory.unpack("III", base + 12 * index)
            self.preopens[self.memory.string(ptr, length)] = handle

    def _realloc(self, _old: int, _old_size: int, align: int, size: int) -> int:
        ptr = -(-self._heap // align) * align
        self._heap = ptr + size
        return ptr

    def _path(self, path: str, at: int = PATH) -> tuple[int, int]:
        data = path.encode()
        self.memory.write(at, data)
        return at, len(data)

    def _handle_result(self) -> int | WasiErrno:
        """A result<own<T>, error-code> (or one laid out alike) at RET."""
        tag, value = self.memory.unpack("B3xI", RET)
        return WasiErrno(self.memory.unpack("B3xB", RET)[1]) if tag else int(value)

    def _unit_result(self) -> WasiErrno | None:
        tag, code = self.memory.unpack("BB", RET)
        return WasiErrno(code) if tag else None

    def open(
        self, path: str, *, at: int | None = None, open_flags: int = 0, flags: int = DESCRIPTOR_READ
    ) -> int | WasiErrno:
        """`descriptor.open-at` beneath `at` (the workspace's preopen by default)."""
        directory = self.preopens["/workspace"] if at is None else at
        filesystem.open_at(self.call, directory, 0, *self._path(path), open_flags, flags, RET)
        return self._handle_result()

    def create(self, path: str) -> int | WasiErrno:
        return self.open(path, open_flags=filesystem.OPEN_CREATE, flags=DESCRIPTOR_WRITE)

    def read(self, handle: int) -> bytes:
        filesystem.read(self.call, handle, 1 << 16, 0, RET)
        tag, ptr, size, _ = self.memory.unpack("B3xIIB", RET)
        assert tag == 0, WasiErrno(self.memory.unpack("B3xB", RET)[1])
        return self.memory.read(ptr, size)

    def rename(self, old: str, new: str) -> WasiErrno | None:
        workspace = self.preopens["/workspace"]
        old_at, new_at = self._path(old), self._path(new, OTHER_PATH)
        filesystem.rename_at(self.call, workspace, *old_at, workspace, *new_at, RET)
        return self._unit_result()

    def symlink(self, target: str, path: str) -> WasiErrno | None:
        workspace = self.preopens["/workspace"]
        filesystem.symlink_at(
            self.call, workspace, *self._path(target), *self._path(path, OTHER_PATH), RET
        )
        return self._unit_result()

    def link(self, old: str, new: str) -> WasiErrno | None:
        workspace = self.preopens["/workspace"]
        old_at, new_at = self._path(old), self._path(new, OTHER_PATH)
        filesystem.link_at(self.call, workspace, 0, *old_at, workspace, *new_at, RET)
        return self._unit_result()

    def readlink(self, path: str) -> int | WasiErrno:
        filesystem.readlink_at(self.call, self.preopens["/workspace"], *self._path(path), RET)
        return self._handle_result()

    def close(self) -> None:
        self.host.close()


@pytest.fixture
def calls(tree: VirtualFS) -> Iterator[HostCalls]:
    """The host with `/workspace` and, as Perl has it, a read-only `/dev` beside it."""
    host = HostCalls([Mount("/workspace", tree), Mount("/dev", VirtualFS.devices())])
    yield host
    host.close()


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "/workspace/sub/file.txt",  # absolute even where it names a file of the mount
        "..",
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "sub/../..",
        ".//sub/..//../workspace/sub/file.txt",
        "../dev/null",  # another mount is no nearer
    ],
)
def test_paths_out_of_the_mount_are_not_permitted(
    calls: HostCalls, tree: VirtualFS, path: str
) -> None:
    assert calls.open(path) == WasiErrno.NOTPERM
    assert calls.create(path) == WasiErrno.NOTPERM
    assert calls.rename("sub/file.txt", path) == WasiErrno.NOTPERM
    assert tree.files() == TREE


def test_dotdot_never_leaves_the_descriptor_a_path_starts_from(
    calls: HostCalls, tree: VirtualFS
) -> None:
    """As cap-std: `..` goes back up only as far as the descriptor's own directory."""
    sub = calls.open("sub", open_flags=filesystem.OPEN_DIRECTORY)
    assert isinstance(sub, int)
    assert calls.open("..", at=sub) == WasiErrno.NOTPERM
    assert calls.open("../file.txt", at=sub) == WasiErrno.NOTPERM
    root = calls.open(".")
    assert isinstance(root, int)
    again = calls.open("sub/../sub/file.txt", at=root)
    assert isinstance(again, int) and calls.read(again) == b"inside"
    assert calls.open("..", at=root) == WasiErrno.NOTPERM
    assert calls.open("../..", at=sub) == WasiErrno.NOTPERM
    assert calls.open("../../workspace/sub/file.txt", at=sub) == WasiErrno.NOTPERM
    assert calls.open("/workspace/sub/file.txt", at=sub) == WasiErrno.NOTPERM
    inside = calls.open("file.txt", at=sub)
    assert isinstance(inside, int) and calls.read(inside) == b"inside"
    assert tree.files() == TREE


def test_dot_and_dotdot_inside_the_mount_resolve_by_name(calls: HostCalls) -> None:
    for path in ("sub/file.txt", "sub/./file.txt", "./sub//file.txt", "sub/../sub/file.txt"):
        handle = calls.open(path)
        assert isinstance(handle, int), (path, handle)
        assert calls.read(handle) == b"inside", path
    assert isinstance(calls.open("sub/"), int)
    assert isinstance(calls.open("sub/.."), int)
    assert calls.open("sub/file.txt/") == WasiErrno.NOTDIR
    assert calls.open("sub/file.txt/..") == WasiErrno.NOTDIR


def test_symlink_loops_and_bad_names_are_errors(calls: HostCalls, tree: VirtualFS) -> None:
    """No link can be made (so no loop, and no link out), nothing reads as a link, and
    malformed names are errors."""
    assert calls.symlink("loop_b", "loop_a") == WasiErrno.NOTPERM
    assert calls.symlink("loop_a", "loop_b") == WasiErrno.NOTPERM
    assert calls.symlink("/etc", "absolute") == WasiErrno.NOTPERM
    assert calls.link("sub/file.txt", "hard") == WasiErrno.NOTPERM
    assert calls.open("loop_a") == WasiErrno.NOENT
    assert calls.readlink("sub/file.txt") == WasiErrno.INVAL
    assert calls.readlink("sub") == WasiErrno.INVAL
    assert calls.readlink("loop_a") == WasiErrno.NOENT
    assert calls.open("") == WasiErrno.NOENT
    assert calls.open("sub/\0x") == WasiErrno.INVAL
    assert calls.open("sub/file.txt/x") == WasiErrno.NOTDIR
    assert tree.files() == TREE and entries(tree) == ["sub", "sub/file.txt"]


def test_the_dev_mount_is_read_only(calls: HostCalls) -> None:
    """Nothing can be made in `/dev`; `null` opens for writing (its writes vanish), with
    the mutate-directory flag wasi-libc adds to every write."""
    dev = calls.preopens["/dev"]
    null = calls.open("null", at=dev)
    assert isinstance(null, int) and calls.read(null) == b""
    writer = calls.open("null", at=dev, flags=DESCRIPTOR_WRITE | MUTATE_DIRECTORY)
    assert isinstance(writer, int) and writer != null
    made = calls.open("x", at=dev, open_flags=filesystem.OPEN_CREATE, flags=DESCRIPTOR_WRITE)
    assert made == WasiErrno.NOTPERM


# --- under the real Python guest ---------------------------------------------------------


@pytest.fixture(scope="module")
def prepared() -> Iterator[Prepared]:
    require_engine("python")
    yield prepare_component()


@pytest.fixture
def guest(prepared: Prepared, tree: VirtualFS) -> Iterator[Guest]:
    live = Guest(prepared, tree)
    yield live
    live.close()


@pytest.mark.parametrize(
    "code",
    [
        "open({secret!r}).read()",
        "open({secret!r}, 'w').write('x')",
        "open('/workspace/../secret.txt').read()",
        "open('/workspace/sub/../../secret.txt').read()",
        "import os\nos.chdir('sub')\nopen('../../secret.txt').read()",
        "import os\nos.listdir('/workspace/..')",
        "import os\nos.listdir('/')",
        "open('/workspace/../new.txt', 'w').write('x')",
        "import os\nos.rename('/workspace/sub/file.txt', '/workspace/../moved.txt')",
        "import os\nfd = os.open('/workspace/sub', os.O_RDONLY)\nos.open('../..', 0, dir_fd=fd)",
    ],
)
def test_the_guest_cannot_leave_its_workspace(
    guest: Guest, tree: VirtualFS, secret: Path, code: str
) -> None:
    run = guest.run(code.format(secret=str(secret)), session=True)
    assert run.error is not None, code
    assert run.error.name in {"PermissionError", "FileNotFoundError", "OSError"}, run.error
    assert SECRET not in run.stdout + run.stderr + run.error.message
    assert sorted(path.name for path in secret.parent.iterdir()) == ["secret.txt"]
    assert secret.read_text() == SECRET
    assert tree.files() == TREE


def test_the_guest_resolves_dotdot_that_stays_inside(guest: Guest) -> None:
    code = "import os\n(open('sub/../sub/./file.txt').read(), sorted(os.listdir('sub/..')))"
    assert guest.run(code, session=True).text == "('inside', ['sub'])"


def test_the_guest_cannot_create_links(guest: Guest, tree: VirtualFS) -> None:
    for code in ("os.symlink('sub/file.txt', 'made')", "os.link('sub/file.txt', 'made')"):
        run = guest.run(f"import os\n{code}", session=True)
        assert run.error is not None and run.error.name == "PermissionError", code
        assert run.error.message.startswith("[Errno 63] Operation not permitted"), code
    assert tree.state("made").kind == "absent"
    assert tree.files() == TREE


def test_readlink_never_shows_a_host_path(guest: Guest, tmp_path: Path) -> None:
    """Nothing is a link: readlink fails for every path, and no message names a host path."""
    expected = {
        "sub/file.txt": ("OSError", "[Errno 28] Invalid argument"),
        "sub": ("OSError", "[Errno 28] Invalid argument"),
        "missing": ("FileNotFoundError", "[Errno 44] No such file or directory"),
        "../outside": ("PermissionError", "[Errno 63] Operation not permitted"),
    }
    for path, (name, message) in expected.items():
        run = guest.run(f"import os\nos.readlink({path!r})", session=True)
        assert run.error is not None, path
        assert (run.error.name, run.error.message) == (name, f"{message}: {path!r}")
        assert str(tmp_path) not in run.error.message and str(Path.cwd()) not in run.error.message


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
def test_a_blocking_wait_wakes_when_cancelled(code: str) -> None:
    """In process, without an engine process to end: the host's wait itself wakes up and
    the guest traps at its next epoch check."""
    require_engine("python")
    with Session("python", workspace=VirtualFS(), limits=Limits(timeout_seconds=60)) as live:
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


def test_a_blocking_wait_wakes_at_the_deadline() -> None:
    require_engine("python")
    with Session("python", workspace=VirtualFS(), limits=Limits(timeout_seconds=0.5)) as live:
        started = time.monotonic()
        outcome = live.execute("import time\ntime.sleep(30)")
        assert time.monotonic() - started < 2
        assert outcome.result.error is not None
        assert outcome.result.error.message == "Execution timed out after 0.5 s"


def test_a_wait_returns_at_once_when_woken() -> None:
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


def _host() -> WasiHost:
    return WasiHost(mounts=[Mount("/workspace", VirtualFS())], stdout=print, stderr=print)


def test_host_state_round_trips_through_json() -> None:
    host = _host()
    descriptor = {"type": "descriptor", "preopen": 0, "path": "", "dir": True, "flags": 33}
    first = host.add(descriptor)
    host.add({"type": "pollable", "deadline": None})
    host.drop(first, "descriptor")
    state = json.loads(json.dumps(host.state()))
    other = _host()
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
def test_malformed_host_state_is_refused(table: object) -> None:
    host = _host()
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
