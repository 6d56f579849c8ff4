"""Where the workbench keeps its data, configuration and caches (platformdirs).

The data dir holds env vars and execution history and the config dir may hold tokens:
both are created 0700 whatever the umask. An existing one is tightened only when it is
our own default directory, never a directory the user named (`--data-dir /tmp`).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from engines.locations import cache_root

# Re-exported for the layers that may not import `engines` (the TUI).
from engines.locations import private_directory as private_directory
from engines.locations import private_file as private_file

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


def private_data_dir(override: Path | None = None) -> Path:
    """`data_dir(override)`, created 0700 if missing (tightened if it is the default)."""
    directory = data_dir(override)
    default = Path(platformdirs.user_data_dir(APP_NAME))
    return private_directory(directory, tighten=directory == default)


def private_config_dir(directory: Path) -> Path:
    """The directory of a config file, like `private_data_dir`."""
    default = Path(platformdirs.user_config_dir(APP_NAME))
    return private_directory(directory, tighten=directory == default)


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
