"""`sandbox-workbench locate`: where configuration, data and caches live."""

from __future__ import annotations

from pathlib import Path

import click

from workbench.cli.common import data_dir_option
from workbench.cli.terminal import echo_json, echo_untrusted


@click.command(
    "locate",
    epilog="""\b
Examples:
  sandbox-workbench locate
  sandbox-workbench locate --json | jq -r .database""",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@data_dir_option
def locate_command(data_dir: Path | None, as_json: bool) -> None:
    """Print where config, data, caches and the local daemon's socket and log live."""
    from workbench import paths
    from workbench.backends.daemon.location import log_path, socket_location

    data = paths.data_dir(data_dir)
    places = {
        "config": str(paths.config_file()),
        "data": str(data),
        "database": str(data / paths.DATABASE_NAME),
        "cache": str(paths.cache_dir()),
        "engines": str(paths.cache_dir() / "engines"),
        "socket": str(socket_location(data)),
        "log": str(log_path(data)),
    }
    if as_json:
        echo_json(places)
        return
    for name, place in places.items():
        echo_untrusted(f"{name:<9}{place}")
