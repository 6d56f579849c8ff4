"""POST /files bodies end to end: validation, shapes, errno → code mapping (spec 4.3, 5)."""

from typing import Any

import pytest

from workbench.backends.local.files import files_request, looks_binary, mime_type_for
from workbench.core.workspace import Workspace
from workbench.protocol import errors

NOW = 1788862272345
TS = "2026-09-08T10:11:12.345Z"
CREATED = "2026-01-01T00:00:00.000Z"


def call(ws: Workspace, **body: Any) -> dict[str, Any]:
    return files_request(ws, body, now=NOW, sandbox_created_at=CREATED)[0].to_json()


def fail(ws: Workspace, body: object) -> errors.SandboxError:
    with pytest.raises(errors.SandboxError) as ei:
        files_request(ws, body, now=NOW, sandbox_created_at=CREATED)
    return ei.value


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"op": "chmod", "path": "a"}, "Unknown op"),
        ({"path": "a"}, "Unknown op"),
        ({"op": "read"}, "path is required"),
        ({"op": "read", "path": ""}, "path is required"),
        ({"op": "move", "path": "a"}, "newPath is required for move"),
        ({"op": "rename", "path": "a", "newPath": ""}, "newPath is required for rename"),
        ({"op": "read", "path": "a", "encoding": "utf8"}, "encoding must be utf-8 or base64"),
        ({"op": "read", "path": "a", "encoding": None}, "encoding must be utf-8 or base64"),
        ([1], "Expected an object"),
    ],
)
def test_validation(body: object, message: str) -> None:
    e = fail(Workspace(), body)
    assert isinstance(e, errors.ValidationFailedError)
    assert (e.message, e.http_status, e.context, e.operation) == (message, 400, {}, None)


def test_write_read_roundtrip() -> None:
    ws = Workspace()
    res, cs = files_request(
        ws,
        {"op": "write", "path": "x.py", "content": "print(1)"},
        now=NOW,
        sandbox_created_at=CREATED,
    )
    assert res.to_json() == {"success": True, "path": "/workspace/x.py", "timestamp": TS}
    assert len(cs) == 1
    assert call(ws, op="read", path="/workspace/./x.py") == {
        "success": True,
        "path": "/workspace/x.py",
        "content": "print(1)",
        "encoding": "utf-8",
        "isBinary": False,
        "mimeType": "text/x-python",
        "size": 8,
        "timestamp": TS,
    }
    call(ws, op="write", path="b.bin", content="AP8=", encoding="base64")
    r = call(ws, op="read", path="b.bin", encoding="base64")
    assert (r["content"], r["isBinary"], r["mimeType"], r["size"]) == (
        "AP8=",
        True,
        "application/octet-stream",
        2,
    )
    assert call(ws, op="read", path="b.bin")["content"] == "\x00\ufffd"
    call(ws, op="write", path="empty")
    assert call(ws, op="read", path="empty")["content"] == ""


def test_error_context_and_codes() -> None:
    ws = Workspace()
    e = fail(ws, {"op": "read", "path": "./nope"})
    assert isinstance(e, errors.FileNotFoundError)
    assert e.to_json() == {
        "code": "FILE_NOT_FOUND",
        "message": "No such file: ./nope",
        "context": {"path": "./nope", "operation": "file.read", "errno": "ENOENT"},
        "httpStatus": 404,
        "timestamp": TS,
        "operation": "file.read",
    }
    e = fail(ws, {"op": "exists", "path": "../etc"})
    assert isinstance(e, errors.PermissionDeniedError) and e.http_status == 403
    assert e.context == {"path": "../etc", "operation": "file.stat", "errno": "EACCES"}
    e = fail(ws, {"op": "write", "path": "big", "content": "x" * 1048577})
    assert isinstance(e, errors.FileTooLargeError) and e.http_status == 413
    assert e.context == {
        "path": "big",
        "operation": "file.write",
        "maxSize": 1048576,
        "actualSize": 1048577,
        "errno": "EFBIG",
    }
    e = fail(ws, {"op": "write", "path": "b", "content": "@@", "encoding": "base64"})
    assert (e.code, e.http_status, e.message) == ("FILESYSTEM_ERROR", 500, "Invalid base64 content")
    call(ws, op="mkdir", path="d")
    e = fail(ws, {"op": "mkdir", "path": "d"})
    assert (e.code, e.http_status, e.context["errno"]) == ("FILESYSTEM_ERROR", 500, "EEXIST")
    assert e.operation == "directory.create"
    e = fail(ws, {"op": "mkdir", "path": "/tmp"})
    assert e.code == "PERMISSION_DENIED"
    e = fail(ws, {"op": "delete", "path": "d"})
    assert (e.code, e.http_status) == ("IS_DIRECTORY", 400)
    e = fail(ws, {"op": "delete", "path": "/workspace"})
    assert e.code == "PERMISSION_DENIED" and e.message == "Cannot delete the /workspace root"


def test_success_shapes_and_truthiness() -> None:
    ws = Workspace()
    assert call(ws, op="mkdir", path="a/b", recursive=1) == {
        "success": True,
        "path": "/workspace/a/b",
        "recursive": True,
        "timestamp": TS,
    }
    assert call(ws, op="mkdir", path="c", recursive="")["recursive"] is False
    assert call(ws, op="rename", path="c", newPath="./e") == {
        "success": True,
        "path": "/workspace/c",
        "newPath": "/workspace/e",
        "timestamp": TS,
    }
    assert call(ws, op="exists", path="/workspace")["exists"] is True
    assert call(ws, op="delete", path="zz", force=[])["success"] is True  # [] is truthy in JS
    assert call(ws, op="delete", path="a", recursive={})["path"] == "/workspace/a"


def test_list_fileinfo_and_hidden() -> None:
    ws = Workspace()
    call(ws, op="mkdir", path="sub/.git", recursive=True)
    call(ws, op="write", path="sub/.git/HEAD", content="x")
    call(ws, op="write", path="sub/a.txt", content="abc")
    call(ws, op="write", path=".env", content="S=1")
    r = call(ws, op="list", path="/workspace", recursive=True)
    assert r["count"] == 2 and [f["relativePath"] for f in r["files"]] == ["sub", "sub/a.txt"]
    d, f = r["files"]
    assert d == {
        "name": "sub",
        "absolutePath": "/workspace/sub",
        "relativePath": "sub",
        "type": "directory",
        "size": 0,
        "modifiedAt": CREATED,
        "mode": "drwxr-xr-x",
        "permissions": {"readable": True, "writable": True, "executable": True},
    }
    assert f["modifiedAt"] == TS and f["mode"] == "-rw-r--r--" and f["size"] == 3
    r = call(ws, op="list", path="/workspace", recursive=True, includeHidden=True)
    assert r["count"] == 5
    r = call(ws, op="list", path="sub/.git")
    assert [f["relativePath"] for f in r["files"]] == ["HEAD"]  # relative to .git: visible
    e = fail(ws, {"op": "list", "path": "sub/a.txt"})
    assert e.code == "NOT_DIRECTORY" and e.operation == "directory.list"


def test_mime_and_binary() -> None:
    assert mime_type_for("/workspace/x.JSON", False) == "application/json"
    assert mime_type_for("/workspace/a.tar.gz", True) == "application/gzip"
    assert mime_type_for("/workspace/x.unknown", True) == "application/octet-stream"
    assert mime_type_for("/workspace/x", False) == "text/plain"
    assert mime_type_for("/workspace/x.", True) == "application/octet-stream"
    assert not looks_binary(b"") and not looks_binary("é".encode())
    assert looks_binary(b"a\x00b") and looks_binary(b"\xff\xfe")
