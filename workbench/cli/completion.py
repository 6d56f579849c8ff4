"""Shell completion of profile names, runtime bindings and local sandbox ids.

Enabled with click's variable, e.g. `eval "$(_SANDBOX_WORKBENCH_COMPLETE=bash_source
sandbox-workbench)"`. Completing must be fast and must never fail: every source is read
directly (the config file with tomllib, the local store read-only with sqlite3) and any
problem just means no candidates.
"""

from __future__ import annotations

import os
import sqlite3
import tomllib
from contextlib import closing
from pathlib import Path
from urllib.parse import quote

import click
from click.shell_completion import CompletionItem

BINDINGS = ("JAVASCRIPT", "PYTHON", "PERL", "RUBY")
"""The local backend's bindings (a gateway usually deploys the same names)."""


def complete_profiles(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    from workbench.config import LOCAL_PROFILE

    names = [LOCAL_PROFILE]
    try:
        from workbench.config import read_config_text
        from workbench.paths import config_file

        raw = tomllib.loads(read_config_text(config_file()) or "")
        profiles = raw.get("profiles")
        if isinstance(profiles, dict):
            names += sorted(str(name) for name in profiles)
    except Exception:  # completion never fails: no config, no extra names
        pass
    return [CompletionItem(name) for name in names if name.startswith(incomplete)]


def complete_bindings(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    return [CompletionItem(name) for name in BINDINGS if name.startswith(incomplete.upper())]


def _chosen(ctx: click.Context, name: str) -> object:
    """A parameter's value given to this command or before it (None if neither)."""
    for context in (ctx, ctx.find_root()):
        value = context.params.get(name)
        if value is not None:
            return value
    return None


def complete_sandbox_ids(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The local store's sandbox ids (a remote profile's are not listed: too slow)."""
    from workbench.cli.common import PROFILE_ENV
    from workbench.config import LOCAL_PROFILE

    profile = _chosen(ctx, "profile") or os.environ.get(PROFILE_ENV) or LOCAL_PROFILE
    if profile != LOCAL_PROFILE:
        return []
    try:
        from workbench.paths import DATABASE_NAME, data_dir

        chosen = _chosen(ctx, "data_dir")
        database = data_dir(Path(str(chosen)) if chosen else None) / DATABASE_NAME
        if not database.is_file():
            return []
        uri = f"file:{quote(str(database))}?mode=ro"
        with closing(sqlite3.connect(uri, uri=True, timeout=0.2)) as connection:
            rows = connection.execute(
                "SELECT id FROM sandboxes WHERE substr(id, 1, ?) = ? ORDER BY id LIMIT 500",
                (len(incomplete), incomplete),
            ).fetchall()
    except Exception:  # completion never fails: an unreadable store has no candidates
        return []
    return [CompletionItem(str(row[0])) for row in rows]
