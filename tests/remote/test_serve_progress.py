"""The first request to `serve` in a language that is not prepared yet says what it is
doing (issue 12: engine preparation is never silent)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import httpx

from engines.cache import EngineCache
from engines.registry import language_engine
from tests.conftest import require_engine
from tests.serve_process import serve_process


def test_the_first_request_prints_engine_preparation(tmp_path: Path) -> None:
    require_engine("perl")
    # A private cache holding the prepared Perl engine without its compiled module: the
    # first Perl request compiles it.
    perl = language_engine("perl")
    shared = EngineCache(perl)
    cache_root = tmp_path / "cache"
    private = EngineCache(perl, root=cache_root)
    shutil.copytree(shared.directory, private.directory, ignore=shutil.ignore_patterns("*.cwasm"))
    assert not private.is_ready()
    env = {"SANDBOX_WORKBENCH_CACHE_DIR": str(cache_root)}
    with serve_process(tmp_path / "data", env=env) as served:
        assert served.process.stdout is not None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(served.process.stdout), daemon=True)
        reader.start()
        answer = httpx.post(
            f"{served.url}/v1/runtimes/PERL/execute",
            json={"code": "6 * 7"},
            headers={"authorization": f"Bearer {served.token}"},
            timeout=300,
        )
        assert answer.status_code == 200
        assert answer.json()["results"] == [{"text": "42"}]
    reader.join(timeout=10)
    printed = "".join(lines)
    assert "preparing the perl engine: compiling" in printed
    assert "preparing the perl engine: ready (100%)" in printed
    assert private.is_ready()
