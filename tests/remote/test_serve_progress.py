"""The first request to `serve` in a language that is not prepared yet says what it is
doing (issue 12: engine preparation is never silent)."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx

from tests.conftest import javascript_cache_missing_a_module
from tests.serve_process import serve_process


def test_the_first_request_prints_engine_preparation(tmp_path: Path) -> None:
    # A private cache holding the prepared JavaScript engine without one compiled module:
    # the first JavaScript request compiles it.
    cache_root = tmp_path / "cache"
    private = javascript_cache_missing_a_module(cache_root)
    env = {"SANDBOX_WORKBENCH_CACHE_DIR": str(cache_root)}
    with serve_process(tmp_path / "data", env=env) as served:
        assert served.process.stdout is not None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(served.process.stdout), daemon=True)
        reader.start()
        answer = httpx.post(
            f"{served.url}/v1/runtimes/JAVASCRIPT/execute",
            json={"code": "6 * 7"},
            headers={"authorization": f"Bearer {served.token}"},
            timeout=300,
        )
        assert answer.status_code == 200
        assert answer.json()["results"] == [{"text": "42"}]
    reader.join(timeout=10)
    printed = "".join(lines)
    assert "preparing the javascript engine: compiling" in printed
    assert "preparing the javascript engine: ready (100%)" in printed
    assert private.is_ready()
