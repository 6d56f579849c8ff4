"""What we create on disk is private whatever the umask (issue 11, item 9): directories
0700, files 0600. The data dir and database hold env vars and history, the config file
may hold a token, and the engine cache holds compiled native code that is loaded and run.
A directory the user named is never chmod-ed; our own default directories are tightened.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.cache import EngineCache
from tests.engines import TinyEngine
from workbench.backends.local import open_local_backend
from workbench.config import Config, RemoteProfile
from workbench.paths import DATABASE_NAME


@pytest.fixture(params=[0o022, 0o000, 0o277], ids=["umask-022", "umask-000", "umask-277"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def database_files(directory: Path) -> list[Path]:
    database = directory / DATABASE_NAME
    return [database, *(database.with_name(database.name + s) for s in ("-wal", "-shm"))]


async def test_a_new_data_dir_and_database_are_private(tmp_path: Path, umask: int) -> None:
    data = tmp_path / "new" / "data"
    backend = open_local_backend(data, ttl_ms=0, embedded=True)
    try:
        await backend.sandbox("s").set_env_vars({"SECRET": "value"})
        assert mode(data) == mode(data.parent) == 0o700
        for path in database_files(data):  # -wal and -shm exist while the store is open
            assert mode(path) == 0o600, path
    finally:
        await backend.aclose()


async def test_a_user_named_directory_is_left_alone(tmp_path: Path, umask: int) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    backend = open_local_backend(shared, ttl_ms=0, embedded=True)
    try:
        await backend.sandbox("s").set_env_vars({"SECRET": "value"})
        assert mode(shared) == 0o755
        for path in database_files(shared):
            assert mode(path) == 0o600, path
    finally:
        await backend.aclose()


async def test_our_default_data_dir_and_old_database_are_tightened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: int
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("SANDBOX_WORKBENCH_DATA_DIR", raising=False)
    default = tmp_path / "xdg" / "sandbox-workbench"
    default.mkdir(parents=True)
    os.chmod(default, 0o755)  # as an older version left it
    for path in database_files(default):
        path.touch()
        os.chmod(path, 0o644)
    backend = open_local_backend(None, ttl_ms=0, embedded=True)
    try:
        await backend.sandbox("s").set_env_vars({"SECRET": "value"})
        assert mode(default) == 0o700
        for path in database_files(default):
            assert mode(path) == 0o600, path
    finally:
        await backend.aclose()


def test_the_config_dir_and_file_are_private(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "config" / "config.toml"
    config = Config(path=path)
    config.profiles["p"] = RemoteProfile("p", "https://example.test", token="secret")
    config.save()
    assert mode(path.parent) == 0o700
    assert mode(path) == 0o600
    assert not path.with_suffix(".toml.tmp").exists()


def test_our_default_config_dir_is_tightened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: int
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("SANDBOX_WORKBENCH_CONFIG_DIR", raising=False)
    default = tmp_path / "xdg" / "sandbox-workbench"
    default.mkdir(parents=True)
    os.chmod(default, 0o755)
    Config().save()
    assert mode(default) == 0o700
    assert mode(default / "config.toml") == 0o600


def test_the_engine_cache_is_private(tmp_path: Path, umask: int) -> None:
    root = tmp_path / "cache"
    cache = EngineCache(TinyEngine(), root=root)
    cache.prepare()
    directories = [root, root / "engines", cache.directory]
    assert {path: mode(path) for path in directories} == dict.fromkeys(directories, 0o700)
    files = sorted(path for path in cache.directory.iterdir() if path.is_file())
    assert {path.name for path in files} >= {".lock", "engine.wasm", "engine.json"}
    assert any(path.suffix == ".cwasm" for path in files)
    assert {path: mode(path) for path in files} == dict.fromkeys(files, 0o600)


def test_an_existing_engine_directory_is_tightened(tmp_path: Path, umask: int) -> None:
    cache = EngineCache(TinyEngine(), root=tmp_path / "cache")
    cache.directory.mkdir(parents=True)
    os.chmod(cache.directory, 0o755)
    cache.prepare()
    assert mode(cache.directory) == 0o700
