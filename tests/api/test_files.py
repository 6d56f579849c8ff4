"""Files API through the client (spec 4.3-4.5, 5, 6.1-6.3): every op, every error rule."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.api.conftest import raw_call
from workbench.api import (
    Backend,
    FileInfo,
    FileSystemError,
    FileTooLargeError,
    PermissionDeniedError,
    SandboxClient,
    SandboxError,
    ValidationFailedError,
    parse_iso,
)
from workbench.protocol import errors

MiB = 1024 * 1024


def assert_file_error(
    error: SandboxError,
    cls: type[SandboxError],
    code: str,
    status: int,
    message: str,
    *,
    path: str,
    operation: str,
    errno: str,
) -> None:
    """The exact `ErrorResponse` of a file operation (spec 4.1, 4.3)."""
    assert type(error) is cls
    assert error.code == code
    assert error.http_status == status
    assert error.message == message
    assert error.operation == operation
    assert error.context["path"] == path
    assert error.context["operation"] == operation
    assert error.context["errno"] == errno
    assert error.name == cls.__name__
    assert error.to_json()["httpStatus"] == status
    parse_iso(error.timestamp)


async def raises(call: Any) -> SandboxError:
    with pytest.raises(SandboxError) as caught:
        await call
    return caught.value


def by_path(files: list[FileInfo]) -> dict[str, FileInfo]:
    return {info.relative_path: info for info in files}


# ----- write / read ------------------------------------------------------------------


async def test_write_and_read_utf8(sandbox: SandboxClient) -> None:
    written = await sandbox.write_file("notes.txt", "héllo\nwörld")
    assert written.path == "/workspace/notes.txt"
    parse_iso(written.timestamp)

    read = await sandbox.read_file("/workspace/notes.txt")
    assert read.path == "/workspace/notes.txt"
    assert read.content == "héllo\nwörld"
    assert read.encoding == "utf-8"
    assert read.is_binary is False
    assert read.mime_type == "text/plain"
    assert read.size == len("héllo\nwörld".encode())

    # `utf8` is normalized by the client; a relative path resolves under /workspace.
    again = await sandbox.read_file("./notes.txt", encoding="utf8")
    assert again.encoding == "utf-8"
    assert again.content == "héllo\nwörld"


async def test_write_replaces_existing_file(sandbox: SandboxClient) -> None:
    await sandbox.write_file("a.txt", "first version")
    await sandbox.write_file("a.txt", "2nd")
    read = await sandbox.read_file("a.txt")
    assert (read.content, read.size) == ("2nd", 3)


async def test_binary_round_trip(sandbox: SandboxClient) -> None:
    payload = bytes(range(256))
    await sandbox.write_file("blob.bin", payload)
    read = await sandbox.read_file("blob.bin", encoding="base64")
    assert read.encoding == "base64"
    assert base64.b64decode(read.content) == payload
    assert read.data == payload
    assert read.is_binary is True
    assert read.mime_type == "application/octet-stream"
    assert read.size == 256
    assert await sandbox.read_bytes("blob.bin") == payload

    # Read as utf-8 the bytes come back with replacement characters, still binary.
    as_text = await sandbox.read_file("blob.bin")
    assert as_text.is_binary is True
    assert "\ufffd" in as_text.content


async def test_write_base64_string_content(sandbox: SandboxClient) -> None:
    await sandbox.write_file(
        "img.png", base64.b64encode(b"\x89PNG\r\n").decode(), encoding="base64"
    )
    read = await sandbox.read_file("img.png")
    assert read.mime_type == "image/png"
    assert read.size == 6
    assert await sandbox.read_bytes("img.png") == b"\x89PNG\r\n"


async def test_binary_detection_and_mime_types(sandbox: SandboxClient) -> None:
    await sandbox.write_file("nul.txt", "a\x00b")  # valid UTF-8 but a NUL: binary
    nul = await sandbox.read_file("nul.txt")
    assert nul.is_binary is True
    assert nul.mime_type == "text/plain"  # known extension wins

    await sandbox.write_file("empty.dat", "")
    empty = await sandbox.read_file("empty.dat")
    assert (empty.is_binary, empty.size, empty.content) == (False, 0, "")
    assert empty.mime_type == "text/plain"  # unknown extension, not binary

    expected = {
        "a.json": "application/json",
        "a.JS": "text/javascript",
        "a.mjs": "text/javascript",
        "a.py": "text/x-python",
        "a.pl": "text/x-perl",
        "a.rb": "text/x-ruby",
        "a.md": "text/markdown",
        "a.html": "text/html",
        "a.css": "text/css",
        "a.csv": "text/csv",
        "a.jpeg": "image/jpeg",
        "a.svg": "image/svg+xml",
        "a.wasm": "application/wasm",
        "a.gz": "application/gzip",
        "noext": "text/plain",
    }
    for name in expected:
        await sandbox.write_file(name, "x")
    for name, mime in expected.items():
        assert (await sandbox.read_file(name)).mime_type == mime, name


async def test_read_errors(sandbox: SandboxClient) -> None:
    error = await raises(sandbox.read_file("missing.txt"))
    assert_file_error(
        error,
        errors.FileNotFoundError,
        "FILE_NOT_FOUND",
        404,
        "No such file: missing.txt",
        path="missing.txt",
        operation="file.read",
        errno="ENOENT",
    )
    await sandbox.mkdir("dir")
    error = await raises(sandbox.read_file("dir"))
    assert_file_error(
        error,
        FileSystemError,
        "IS_DIRECTORY",
        400,
        "Is a directory: dir",
        path="dir",
        operation="file.read",
        errno="EISDIR",
    )
    error = await raises(sandbox.read_file("/workspace"))
    assert (type(error), error.code, error.http_status) == (FileSystemError, "IS_DIRECTORY", 400)


async def test_write_errors(sandbox: SandboxClient) -> None:
    error = await raises(sandbox.write_file("nope/a.txt", "x"))
    assert_file_error(
        error,
        errors.FileNotFoundError,
        "FILE_NOT_FOUND",
        404,
        error.message,
        path="nope/a.txt",
        operation="file.write",
        errno="ENOENT",
    )
    await sandbox.write_file("file.txt", "x")
    error = await raises(sandbox.write_file("file.txt/a.txt", "x"))
    assert (type(error), error.code, error.http_status) == (FileSystemError, "NOT_DIRECTORY", 400)
    assert error.context["errno"] == "ENOTDIR"

    error = await raises(sandbox.write_file("/workspace", "x"))
    assert_file_error(
        error,
        FileSystemError,
        "IS_DIRECTORY",
        400,
        "Cannot write to the /workspace root",
        path="/workspace",
        operation="file.write",
        errno="EISDIR",
    )
    await sandbox.mkdir("d")
    error = await raises(sandbox.write_file("d", "x"))
    assert (error.code, error.context["errno"]) == ("IS_DIRECTORY", "EISDIR")

    error = await raises(sandbox.write_file("bad.bin", "!!not base64!!", encoding="base64"))
    assert_file_error(
        error,
        FileSystemError,
        "FILESYSTEM_ERROR",
        500,
        "Invalid base64 content",
        path="bad.bin",
        operation="file.write",
        errno="EINVAL",
    )
    assert not (await sandbox.exists("bad.bin")).exists


async def test_request_validation(backend: Backend, sandbox: SandboxClient) -> None:
    error = await raises(sandbox.write_file("a.txt", "x", encoding="latin-1"))
    assert type(error) is ValidationFailedError
    assert (error.code, error.http_status) == ("VALIDATION_FAILED", 400)
    assert error.message == "encoding must be utf-8 or base64"

    error = await raises(sandbox.read_file(""))
    assert (type(error), error.message) == (ValidationFailedError, "path is required")

    error = await raises(sandbox.rename_file("a.txt", ""))
    assert (type(error), error.message) == (ValidationFailedError, "newPath is required for rename")
    error = await raises(sandbox.move_file("a.txt", ""))
    assert error.message == "newPath is required for move"

    error = await raises(
        raw_call(backend, sandbox.id, "POST", "/files", {"op": "chmod", "path": "a"})
    )
    assert (type(error), error.http_status, error.message) == (
        ValidationFailedError,
        400,
        "Unknown op",
    )
    error = await raises(raw_call(backend, sandbox.id, "POST", "/files", ["read"]))
    assert (type(error), error.message) == (ValidationFailedError, "Expected an object")
    # the server does not accept `utf8` (only the client normalizes it)
    error = await raises(
        raw_call(
            backend, sandbox.id, "POST", "/files", {"op": "read", "path": "a", "encoding": "utf8"}
        )
    )
    assert error.message == "encoding must be utf-8 or base64"


async def test_files_request_size_cap(sandbox: SandboxClient) -> None:
    # 1.6 MiB of bytes is 2.1 MiB of base64: over the 2 MiB cap of POST /files
    error = await raises(sandbox.write_file("big.bin", bytes(1677722)))
    assert type(error) is ValidationFailedError
    assert (error.code, error.http_status, error.message) == (
        "VALIDATION_FAILED",
        413,
        "Request too large",
    )


# ----- path confinement ------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["../etc/passwd", "/etc/passwd", "/", "/workspace2/a", "a/../../x"]
)
async def test_escaping_paths_are_denied_even_for_exists(sandbox: SandboxClient, path: str) -> None:
    error = await raises(sandbox.exists(path))
    assert_file_error(
        error,
        PermissionDeniedError,
        "PERMISSION_DENIED",
        403,
        f"Path escapes /workspace: {path}",
        path=path,
        operation="file.stat",
        errno="EACCES",
    )
    error = await raises(sandbox.write_file(path, "x"))
    assert (type(error), error.http_status, error.operation) == (
        PermissionDeniedError,
        403,
        "file.write",
    )
    error = await raises(sandbox.read_file(path))
    assert (type(error), error.operation) == (PermissionDeniedError, "file.read")


async def test_dot_dot_inside_workspace_is_fine(sandbox: SandboxClient) -> None:
    await sandbox.write_file("/workspace/../workspace/a.txt", "ok")
    assert (await sandbox.read_file("a.txt")).content == "ok"
    result = await sandbox.exists("/workspace/x/../a.txt")
    assert (result.path, result.exists) == ("/workspace/a.txt", True)


# ----- mkdir -------------------------------------------------------------------------


async def test_mkdir(sandbox: SandboxClient) -> None:
    made = await sandbox.mkdir("a")
    assert (made.path, made.recursive) == ("/workspace/a", False)
    parse_iso(made.timestamp)

    made = await sandbox.mkdir("x/y/z", recursive=True)
    assert (made.path, made.recursive) == ("/workspace/x/y/z", True)
    assert (await sandbox.exists("x/y")).exists
    # recursive on an existing directory succeeds; the root is a no-op success
    assert (await sandbox.mkdir("x/y", recursive=True)).path == "/workspace/x/y"
    assert (await sandbox.mkdir("/workspace")).path == "/workspace"


async def test_mkdir_failures_are_recoded_to_filesystem_error(sandbox: SandboxClient) -> None:
    await sandbox.mkdir("a")
    error = await raises(sandbox.mkdir("a"))
    assert_file_error(
        error,
        FileSystemError,
        "FILESYSTEM_ERROR",
        500,
        "Already exists: a",
        path="a",
        operation="directory.create",
        errno="EEXIST",
    )
    error = await raises(sandbox.mkdir("missing/child"))
    assert (type(error), error.code, error.http_status) == (
        FileSystemError,
        "FILESYSTEM_ERROR",
        500,
    )
    assert error.context["errno"] == "ENOENT"

    await sandbox.write_file("f.txt", "x")
    error = await raises(sandbox.mkdir("f.txt/sub", recursive=True))
    assert (error.code, error.http_status, error.context["errno"]) == (
        "FILESYSTEM_ERROR",
        500,
        "ENOTDIR",
    )
    # EACCES is not re-coded
    error = await raises(sandbox.mkdir("../out"))
    assert (type(error), error.code, error.http_status) == (
        PermissionDeniedError,
        "PERMISSION_DENIED",
        403,
    )


async def test_empty_directories_are_listed(sandbox: SandboxClient) -> None:
    await sandbox.mkdir("empty")
    listing = await sandbox.list_files()
    assert [(f.name, f.type, f.size) for f in listing.files] == [("empty", "directory", 0)]


# ----- delete ------------------------------------------------------------------------


async def test_delete(sandbox: SandboxClient) -> None:
    await sandbox.write_file("a.txt", "x")
    deleted = await sandbox.delete_file("a.txt")
    assert deleted.path == "/workspace/a.txt"
    assert not (await sandbox.exists("a.txt")).exists

    error = await raises(sandbox.delete_file("a.txt"))
    assert_file_error(
        error,
        errors.FileNotFoundError,
        "FILE_NOT_FOUND",
        404,
        "No such file or directory: a.txt",
        path="a.txt",
        operation="file.delete",
        errno="ENOENT",
    )
    # force ignores missing files and missing parents
    assert (await sandbox.delete_file("a.txt", force=True)).path == "/workspace/a.txt"
    assert (await sandbox.delete_file("no/such/file", force=True)).path == "/workspace/no/such/file"


async def test_delete_directory_needs_recursive(sandbox: SandboxClient) -> None:
    await sandbox.mkdir("empty")
    error = await raises(sandbox.delete_file("empty"))
    assert_file_error(
        error,
        FileSystemError,
        "IS_DIRECTORY",
        400,
        "Cannot delete directory with deleteFile() at 'empty'. "
        "Pass { recursive: true } to delete a directory.",
        path="empty",
        operation="file.delete",
        errno="EISDIR",
    )
    await sandbox.mkdir("tree/sub", recursive=True)
    await sandbox.write_file("tree/sub/f.txt", "x")
    await sandbox.delete_file("tree", recursive=True)
    assert not (await sandbox.exists("tree/sub/f.txt")).exists
    assert not (await sandbox.exists("tree")).exists
    await sandbox.delete_file("empty", recursive=True)
    assert (await sandbox.list_files()).count == 0


async def test_delete_root_is_denied(sandbox: SandboxClient) -> None:
    error = await raises(sandbox.delete_file("/workspace", recursive=True))
    assert_file_error(
        error,
        PermissionDeniedError,
        "PERMISSION_DENIED",
        403,
        "Cannot delete the /workspace root",
        path="/workspace",
        operation="file.delete",
        errno="EACCES",
    )


# ----- rename / move -----------------------------------------------------------------


@pytest.mark.parametrize("op", ["rename", "move"])
async def test_rename_and_move(sandbox: SandboxClient, op: str) -> None:
    call = sandbox.rename_file if op == "rename" else sandbox.move_file
    operation = f"file.{op}"
    await sandbox.write_file("a.txt", "A")
    moved = await call("a.txt", "./b.txt")
    assert (moved.path, moved.new_path) == ("/workspace/a.txt", "/workspace/b.txt")
    assert not (await sandbox.exists("a.txt")).exists
    assert (await sandbox.read_file("b.txt")).content == "A"

    # file over file replaces
    await sandbox.write_file("c.txt", "C")
    await call("c.txt", "b.txt")
    assert (await sandbox.read_file("b.txt")).content == "C"

    # a directory moves with its subtree, and onto an empty directory replaces it
    await sandbox.mkdir("d1/inner", recursive=True)
    await sandbox.write_file("d1/inner/f.txt", "F")
    await sandbox.mkdir("empty")
    await call("d1", "empty")
    assert (await sandbox.read_file("empty/inner/f.txt")).content == "F"
    assert not (await sandbox.exists("d1")).exists

    error = await raises(call("missing.txt", "x.txt"))
    assert_file_error(
        error,
        errors.FileNotFoundError,
        "FILE_NOT_FOUND",
        404,
        "No such file or directory: missing.txt",
        path="missing.txt",
        operation=operation,
        errno="ENOENT",
    )
    error = await raises(call("b.txt", "nodir/b.txt"))
    assert (type(error), error.code, error.context["errno"]) == (
        errors.FileNotFoundError,
        "FILE_NOT_FOUND",
        "ENOENT",
    )
    error = await raises(call("b.txt", "b.txt/inner"))
    assert (error.code, error.http_status, error.context["errno"]) == (
        "NOT_DIRECTORY",
        400,
        "ENOTDIR",
    )
    # destination exists: dir -> file ENOTDIR, file -> dir EISDIR, non-empty dir ENOTEMPTY
    await sandbox.mkdir("dir2")
    error = await raises(call("dir2", "b.txt"))
    assert (type(error), error.code, error.http_status) == (FileSystemError, "NOT_DIRECTORY", 400)
    error = await raises(call("b.txt", "dir2"))
    assert (type(error), error.code, error.http_status) == (FileSystemError, "IS_DIRECTORY", 400)
    error = await raises(call("dir2", "empty"))
    assert_file_error(
        error,
        FileSystemError,
        "FILESYSTEM_ERROR",
        500,
        "Directory not empty: empty",
        path="dir2",
        operation=operation,
        errno="ENOTEMPTY",
    )
    # the root can be neither source nor destination
    error = await raises(call("/workspace", "x"))
    assert (type(error), error.http_status, error.message) == (
        PermissionDeniedError,
        403,
        "Cannot rename the /workspace root",
    )
    error = await raises(call("b.txt", "/workspace"))
    assert (type(error), error.http_status, error.message) == (
        PermissionDeniedError,
        403,
        "Cannot rename onto the /workspace root",
    )
    error = await raises(call("b.txt", "../b.txt"))
    assert (type(error), error.context["errno"]) == (PermissionDeniedError, "EACCES")
    assert (await sandbox.read_file("b.txt")).content == "C"


# ----- list / exists ---------------------------------------------------------------


async def test_list_files(sandbox: SandboxClient) -> None:
    info = await sandbox.get_info()
    await sandbox.mkdir("sub/deeper", recursive=True)
    await sandbox.write_file("top.txt", "12345")
    await sandbox.write_file("sub/a.py", "print(1)")
    await sandbox.write_file("sub/deeper/b.txt", "b")
    await sandbox.write_file(".hidden", "h")
    await sandbox.mkdir(".git")
    await sandbox.write_file(".git/config", "c")
    await sandbox.write_file("sub/.secret", "s")

    flat = await sandbox.list_files("/workspace")
    assert flat.path == "/workspace"
    assert set(by_path(flat.files)) == {"sub", "top.txt"}
    assert flat.count == 2

    top = by_path(flat.files)["top.txt"]
    assert top.name == "top.txt"
    assert top.absolute_path == "/workspace/top.txt"
    assert (top.type, top.size, top.mode) == ("file", 5, "-rw-r--r--")
    parse_iso(top.modified_at)
    sub = by_path(flat.files)["sub"]
    assert (sub.type, sub.size, sub.mode) == ("directory", 0, "drwxr-xr-x")
    assert sub.modified_at == info.created_at  # directories report the sandbox's createdAt

    deep = await sandbox.list_files(recursive=True)
    assert set(by_path(deep.files)) == {
        "sub",
        "sub/a.py",
        "sub/deeper",
        "sub/deeper/b.txt",
        "top.txt",
    }
    assert deep.count == 5
    order = [f.relative_path for f in deep.files]
    assert order.index("sub") < order.index("sub/a.py")
    assert order.index("sub/deeper") < order.index("sub/deeper/b.txt")

    hidden = await sandbox.list_files(recursive=True, include_hidden=True)
    assert set(by_path(hidden.files)) == {
        "sub",
        "sub/a.py",
        "sub/deeper",
        "sub/deeper/b.txt",
        "sub/.secret",
        "top.txt",
        ".hidden",
        ".git",
        ".git/config",
    }
    assert hidden.count == 9

    nested = await sandbox.list_files("sub", recursive=True)
    assert nested.path == "/workspace/sub"
    assert set(by_path(nested.files)) == {"a.py", "deeper", "deeper/b.txt"}
    assert by_path(nested.files)["deeper/b.txt"].absolute_path == "/workspace/sub/deeper/b.txt"


async def test_list_errors(sandbox: SandboxClient) -> None:
    error = await raises(sandbox.list_files("nope"))
    assert_file_error(
        error,
        errors.FileNotFoundError,
        "FILE_NOT_FOUND",
        404,
        "No such directory: nope",
        path="nope",
        operation="directory.list",
        errno="ENOENT",
    )
    await sandbox.write_file("f.txt", "x")
    error = await raises(sandbox.list_files("f.txt"))
    assert_file_error(
        error,
        FileSystemError,
        "NOT_DIRECTORY",
        400,
        "Not a directory: f.txt",
        path="f.txt",
        operation="directory.list",
        errno="ENOTDIR",
    )


async def test_exists(sandbox: SandboxClient) -> None:
    root = await sandbox.exists("/workspace")
    assert (root.path, root.exists) == ("/workspace", True)
    await sandbox.mkdir("d")
    await sandbox.write_file("d/f", "x")
    assert (await sandbox.exists("d")).exists
    assert (await sandbox.exists("d/f")).exists
    missing = await sandbox.exists("d/g")
    assert (missing.path, missing.exists) == ("/workspace/d/g", False)


# ----- limits (spec 6.1) -------------------------------------------------------------


async def test_file_size_limit(sandbox: SandboxClient) -> None:
    await sandbox.write_file("max.bin", bytes(MiB))  # exactly 1 MiB is allowed
    assert (await sandbox.read_file("max.bin", encoding="base64")).size == MiB

    error = await raises(sandbox.write_file("big.bin", bytes(MiB + 1)))
    assert_file_error(
        error,
        FileTooLargeError,
        "FILE_TOO_LARGE",
        413,
        "File exceeds 1048576 bytes",
        path="big.bin",
        operation="file.write",
        errno="EFBIG",
    )
    assert error.context["maxSize"] == 1048576
    assert error.context["actualSize"] == MiB + 1
    assert not (await sandbox.exists("big.bin")).exists
    # an oversized replacement leaves the old content in place
    await raises(sandbox.write_file("max.bin", bytes(MiB + 1)))
    assert (await sandbox.read_file("max.bin", encoding="base64")).size == MiB


async def test_total_size_limit(sandbox: SandboxClient) -> None:
    for index in range(16):
        await sandbox.write_file(f"f{index}.bin", bytes([index]) * MiB)
    info = await sandbox.get_info()
    assert (info.workspace_files, info.workspace_bytes) == (16, 16 * MiB)

    error = await raises(sandbox.write_file("one-more.txt", "x"))
    assert_file_error(
        error,
        FileSystemError,
        "NO_SPACE",
        500,
        "Workspace exceeds 16 MiB total",
        path="one-more.txt",
        operation="file.write",
        errno="ENOSPC",
    )
    # replacing a file by a same-sized one stays within the total
    await sandbox.write_file("f0.bin", bytes([9]) * MiB)
    # shrinking frees room
    await sandbox.write_file("f1.bin", "small")
    await sandbox.write_file("one-more.txt", "x")
    info = await sandbox.get_info()
    assert info.workspace_bytes == 15 * MiB + len("small") + 1


async def test_entry_limit(sandbox: SandboxClient, python_engine: None) -> None:
    # 4,095 entries from one guest run (thousands of API calls would dominate the suite
    # through the HTTP backends), the last one through the files API
    filled = await sandbox.interpreter.run_code(
        "import os\nfor index in range(4095): os.mkdir(f'/workspace/d{index}')", binding="PYTHON"
    )
    assert filled.error is None, filled.error
    await sandbox.mkdir("d4095")
    assert (await sandbox.get_info()).workspace_files == 4096

    error = await raises(sandbox.write_file("extra.txt", "x"))
    assert_file_error(
        error,
        FileSystemError,
        "NO_SPACE",
        500,
        "Workspace exceeds 4096 entries",
        path="extra.txt",
        operation="file.write",
        errno="ENOSPC",
    )
    error = await raises(sandbox.mkdir("extra"))
    assert (type(error), error.code, error.http_status, error.context["errno"]) == (
        FileSystemError,
        "NO_SPACE",
        500,
        "ENOSPC",
    )
    # freeing an entry makes room again
    await sandbox.delete_file("d0", recursive=True)
    await sandbox.write_file("extra.txt", "x")
