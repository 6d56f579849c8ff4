"""`sandbox-workbench locate`: where configuration, data and caches live."""

from __future__ import annotations

from pathlib import Path

import click

from workbench.cli.common import data_dir_option, echo_json


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
    """Print where config, data and caches live."""
    from workbench import paths

    places = {
        "config": str(paths.config_file()),
        "data": str(paths.data_dir(data_dir)),
        "database": str(paths.data_dir(data_dir) / paths.DATABASE_NAME),
        "cache": str(paths.cache_dir()),
        "engines": str(paths.cache_dir() / "engines"),
    }
    if as_json:
        echo_json(places)
        return
    for name, place in places.items():
        click.echo(f"{name:<9}{place}")
