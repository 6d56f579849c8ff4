"""Path normalization (spec 6.2) and the clock helpers."""

import pytest

from workbench.core.clock import FixedClock
from workbench.core.paths import WorkspaceOSError, normalize
from workbench.protocol.timestamps import iso_from_ms, ms_from_iso


@pytest.mark.parametrize(
    ("path", "cwd", "absolute"),
    [
        ("/workspace", "/workspace", "/workspace"),
        ("a.txt", "/workspace", "/workspace/a.txt"),
        ("./x/../y//z/", "/workspace/sub", "/workspace/sub/y/z"),
        ("/workspace/../workspace/a", "/workspace", "/workspace/a"),
        ("..", "/workspace/sub", "/workspace"),
    ],
)
def test_ok(path: str, cwd: str, absolute: str) -> None:
    np = normalize(path, cwd)
    assert np.absolute == absolute
    assert np.segments == tuple(absolute.split("/")[2:])


@pytest.mark.parametrize("path", ["/etc/passwd", "/", "/workspace2", "..", "../../x", "/.."])
def test_escape(path: str) -> None:
    with pytest.raises(WorkspaceOSError) as ei:
        normalize(path)
    assert ei.value.errno == "EACCES"
    assert ei.value.message == f"Path escapes /workspace: {path}"


@pytest.mark.parametrize("path", ["", None, 3])
def test_required(path: object) -> None:
    with pytest.raises(WorkspaceOSError) as ei:
        normalize(path)
    assert (ei.value.errno, ei.value.message) == ("ENOENT", "Path is required")


def test_clock_iso() -> None:
    assert iso_from_ms(0) == "1970-01-01T00:00:00.000Z"
    assert iso_from_ms(1788862272345) == "2026-09-08T10:11:12.345Z"
    assert iso_from_ms(-1) == "1969-12-31T23:59:59.999Z"
    assert iso_from_ms(253402300800000) == "+010000-01-01T00:00:00.000Z"
    assert ms_from_iso("2026-09-08T10:11:12.345Z") == 1788862272345
    clock = FixedClock(1000)
    clock.advance(5)
    assert clock.now_ms() == 1005 and clock.now_iso() == "1970-01-01T00:00:01.005Z"
