"""Where the workbench keeps its data, configuration and caches (platformdirs)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from engines.cache import cache_root

APP_NAME = "sandbox-workbench"
DATA_DIR_ENV = "SANDBOX_WORKBENCH_DATA_DIR"
CONFIG_DIR_ENV = "SANDBOX_WORKBENCH_CONFIG_DIR"
DATABASE_NAME = "workbench.sqlite3"


def data_dir(override: Path | None = None) -> Path:
    """`--data-dir`, else `$SANDBOX_WORKBENCH_DATA_DIR`, else the user data dir."""
    if override is not None:
        return override.expanduser()
    from_env = os.environ.get(DATA_DIR_ENV)
    if from_env:
        return Path(from_env).expanduser()
    return Path(platformdirs.user_data_dir(APP_NAME))


def config_dir() -> Path:
    """`$SANDBOX_WORKBENCH_CONFIG_DIR`, else the user config dir."""
    from_env = os.environ.get(CONFIG_DIR_ENV)
    if from_env:
        return Path(from_env).expanduser()
    return Path(platformdirs.user_config_dir(APP_NAME))


def config_file() -> Path:
    return config_dir() / "config.toml"


def cache_dir() -> Path:
    """`$SANDBOX_WORKBENCH_CACHE_DIR`, else the user cache dir (engines live here)."""
    return cache_root()
