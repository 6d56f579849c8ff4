"""The engine cache: preparing, reusing, detecting damage, and reporting missing tools."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import wasmtime

from engines.cache import EngineCache
from engines.components.plan import ComponentArtifact
from engines.host import make_engine
from engines.javascript import ENGINE as JAVASCRIPT
from engines.perl import ENGINE as PERL
from tests.conftest import require_engine
from tests.engines import TinyEngine, run


@pytest.fixture
def perl_cache(tmp_path: Path) -> EngineCache:
    """A private copy of the prepared Perl engine (cheapest to recompile)."""
    require_engine("perl")
    shared = EngineCache(PERL)
    private = EngineCache(PERL, root=tmp_path)
    shutil.copytree(shared.directory, private.directory, ignore=shutil.ignore_patterns(".lock"))
    assert private.is_ready()
    return private


def compiled_file(cache: EngineCache) -> Path:
    build = cache.build()
    assert build is not None
    return cache.compiled_path(build)


def test_truncated_compiled_module_is_detected_and_rebuilt(tmp_path: Path) -> None:
    cache = EngineCache(TinyEngine(), root=tmp_path)
    cache.prepare()
    compiled = compiled_file(cache)
    with compiled.open("r+b") as handle:
        handle.truncate(compiled.stat().st_size // 2)
    assert not cache.is_ready()
    module = cache.load(make_engine())
    assert isinstance(module, wasmtime.Module)
    assert "run" in [export.name for export in module.exports]
    assert cache.is_ready()
    assert cache.verify() == []


def test_rewritten_compiled_module_is_not_loaded_blindly(perl_cache: EngineCache) -> None:
    compiled = compiled_file(perl_cache)
    data = bytearray(compiled.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 4096] = os.urandom(4096)
    compiled.write_bytes(bytes(data))  # same size, new mtime
    assert not perl_cache.is_ready()
    assert perl_cache.verify() != []


def test_foreign_compiled_module_is_refused_by_wasmtime(
    perl_cache: EngineCache, tmp_path: Path
) -> None:
    """A file that passes our cheap checks but is not a module for this wasmtime and
    config is refused by wasmtime's own header check (`load` then rebuilds it, as in the
    truncation test)."""
    compiled = compiled_file(perl_cache)
    foreign = tmp_path / "foreign.cwasm"
    foreign.write_bytes(b"\x7fELF" + os.urandom(1024))
    # pretend the record matches, so only wasmtime's own check can catch it
    os.replace(foreign, compiled)
    record = compiled.with_suffix(".json")
    integrity = json.loads(record.read_text())
    integrity.update(size=compiled.stat().st_size, mtimeNs=compiled.stat().st_mtime_ns)
    record.write_text(json.dumps(integrity))
    assert perl_cache.is_ready()
    with pytest.raises(wasmtime.WasmtimeError):
        wasmtime.Module.deserialize_file(make_engine(), str(compiled))


def test_garbage_build_record_means_not_prepared(perl_cache: EngineCache) -> None:
    perl_cache.build_record_path.write_text("{not json")
    assert perl_cache.build() is None
    assert not perl_cache.is_ready()
    assert perl_cache.verify() == ["not prepared"]


def test_stateless_run_uses_the_cache_entry(perl_cache: EngineCache) -> None:
    del perl_cache
    result = run("perl", "6*7")
    assert [entry.text for entry in result.results] == ["42"]


def test_missing_npm_makes_only_javascript_unavailable(tmp_path: Path) -> None:
    python_bin = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": str(python_bin),
        "SANDBOX_WORKBENCH_CACHE_DIR": str(tmp_path / "empty-cache"),
    }
    listed = subprocess.run(
        [sys.executable, "-m", "workbench", "engines", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    states = {row["language"]: row for row in json.loads(listed.stdout)}
    # Only the JavaScript engine is built with npm; Perl and Ruby are downloaded directly.
    assert states["javascript"]["state"] == "cannot prepare"
    assert "npm not found" in states["javascript"]["detail"]
    assert "install Node.js" in states["javascript"]["detail"]
    for language in ("python", "perl", "ruby"):
        assert states[language]["state"] == "not prepared"
        assert states[language]["detail"] == ""


# --- decomposed components: a directory of modules and a plan ------------------------------


@pytest.fixture
def javascript_cache(tmp_path: Path) -> EngineCache:
    """A private copy of the prepared JavaScript engine (a decomposed component: the
    quickest of the two to compile again)."""
    require_engine("javascript")
    shared = EngineCache(JAVASCRIPT)
    private = EngineCache(JAVASCRIPT, root=tmp_path)
    shutil.copytree(shared.directory, private.directory, ignore=shutil.ignore_patterns(".lock"))
    assert private.is_ready()
    return private


def test_a_decomposed_entry_is_a_private_directory_of_checked_files(
    javascript_cache: EngineCache,
) -> None:
    entry = compiled_file(javascript_cache)
    assert entry.is_dir() and stat.S_IMODE(entry.stat().st_mode) == 0o700
    record = json.loads(entry.with_suffix(".json").read_text())
    files = sorted(path.name for path in entry.iterdir())
    assert sorted(record["files"]) == files and "plan.json" in files
    assert len(files) > 2, "the plan and its core modules"
    assert {stat.S_IMODE((entry / name).stat().st_mode) for name in files} == {0o600}
    assert javascript_cache.verify() == []


@pytest.mark.parametrize("damage", ["truncate", "rewrite", "remove"])
def test_any_damaged_file_of_a_decomposed_entry_is_detected(
    javascript_cache: EngineCache, damage: str
) -> None:
    entry = compiled_file(javascript_cache)
    victim = max((path for path in entry.iterdir()), key=lambda path: path.stat().st_size)
    if damage == "truncate":
        with victim.open("r+b") as handle:
            handle.truncate(victim.stat().st_size // 2)
    elif damage == "rewrite":  # same size, new mtime: caught without hashing
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        victim.write_bytes(bytes(data))
    else:
        victim.unlink()
    assert not javascript_cache.is_ready()
    assert javascript_cache.verify() == [
        "compiled module missing or corrupt (it will be rebuilt on next use)"
    ]


def test_a_damaged_decomposed_entry_is_rebuilt_and_stale_entries_go(
    javascript_cache: EngineCache,
) -> None:
    entry = compiled_file(javascript_cache)
    (entry / "plan.json").write_text("{}")
    stale = javascript_cache.directory / ("0" * 32)  # an entry of an older wasmtime
    stale.mkdir()
    (stale / "plan.json").write_text("{}")
    stale.with_suffix(".json").write_text("{}")
    unrelated = javascript_cache.directory / "notes.txt"
    unrelated.write_text("not ours to delete")
    artifact = javascript_cache.load(JAVASCRIPT.new_engine())
    assert isinstance(artifact, ComponentArtifact)
    assert javascript_cache.is_ready() and javascript_cache.verify() == []
    assert not stale.exists() and not stale.with_suffix(".json").exists()
    assert unrelated.read_text() == "not ours to delete"
    leftovers = [path.name for path in javascript_cache.directory.iterdir()]
    assert not [name for name in leftovers if name.startswith(".") and name != ".lock"]


def _compiled_modules(cache: EngineCache) -> list[str]:
    """Prepare `cache`; the core modules it compiled on the way."""
    labels: list[str] = []
    cache.prepare(lambda label, fraction: labels.append(label))
    return [label for label in labels if label.startswith("compiling core module")]


def test_a_rebuild_compiles_again_only_the_modules_that_were_damaged(
    javascript_cache: EngineCache,
) -> None:
    """A lost plan rebuilds the entry from the compiled modules that still match their
    recorded sha256 (seconds, not the half minute of compiling SpiderMonkey); a module
    that does not match is compiled again, never loaded."""
    entry = compiled_file(javascript_cache)
    modules = sorted(entry.glob("*.cwasm"), key=lambda path: path.stat().st_size)
    (entry / "plan.json").write_text("{}")
    assert _compiled_modules(javascript_cache) == []
    assert javascript_cache.verify() == []

    damaged = modules[0]  # the smallest: quick to compile again
    status = damaged.stat()
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    os.utime(damaged, ns=(status.st_atime_ns, status.st_mtime_ns))  # only sha256 tells
    (entry / "plan.json").write_text("{}")
    assert len(_compiled_modules(javascript_cache)) == 1
    assert javascript_cache.verify() == []
    assert damaged.read_bytes() != bytes(data)
    assert isinstance(javascript_cache.load(JAVASCRIPT.new_engine()), ComponentArtifact)
