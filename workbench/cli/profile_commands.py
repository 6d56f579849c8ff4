"""`sandbox-workbench profiles list | add | remove | show`."""

from __future__ import annotations

import sys

import click

from workbench.cli.common import echo_json
from workbench.config import Config, ConfigError, RemoteProfile, keyring_set
from workbench.profiles import LOCAL


def _load() -> Config:
    try:
        return Config.load()
    except ConfigError as error:
        raise click.ClickException(str(error)) from error


@click.group("profiles")
def profiles_group() -> None:
    """Configure remote gateways (the `local` profile is built in)."""


@profiles_group.command("list")
def list_command() -> None:
    """List profiles."""
    config = _load()
    click.echo(f"{LOCAL}\tembedded local backend")
    for profile in sorted(config.profiles.values(), key=lambda p: p.name):
        click.echo(f"{profile.name}\t{profile.url}\ttoken: {profile.token_source}")


@profiles_group.command("show")
@click.argument("name")
def show_command(name: str) -> None:
    """Show one profile (never its token)."""
    config = _load()
    if name == LOCAL:
        echo_json({"name": LOCAL, "kind": "local"})
        return
    profile = config.profiles.get(name)
    if profile is None:
        raise click.ClickException(f"unknown profile {name!r}")
    echo_json({"name": name, "kind": "remote", "url": profile.url, "token": profile.token_source})


@profiles_group.command("add")
@click.argument("name")
@click.option("--url", required=True, help="The gateway's base URL (https://…).")
@click.option("--token-env", help="Read the token from this environment variable.")
@click.option(
    "--keyring",
    "use_keyring",
    is_flag=True,
    help="Store the token in the OS keyring (prompted, or from --token-stdin).",
)
@click.option("--token-stdin", is_flag=True, help="Read the token for --keyring from stdin.")
@click.option(
    "--insecure-store-token",
    is_flag=True,
    help="Store the token (from stdin) in the config file in plain text.",
)
@click.option("--force", is_flag=True, help="Replace an existing profile of that name.")
def add_command(
    name: str,
    url: str,
    token_env: str | None,
    use_keyring: bool,
    token_stdin: bool,
    insecure_store_token: bool,
    force: bool,
) -> None:
    """Add a remote profile. The token comes from an env var or the OS keyring."""
    if name == LOCAL:
        raise click.UsageError("`local` is built in")
    if not url.startswith(("https://", "http://")):
        raise click.UsageError("--url must start with https:// (or http:// for `serve`)")
    sources = sum([bool(token_env), use_keyring, insecure_store_token])
    if sources != 1:
        raise click.UsageError("choose one of --token-env VAR, --keyring, --insecure-store-token")
    config = _load()
    if name in config.profiles and not force:
        raise click.ClickException(f"profile {name!r} exists (use --force to replace it)")
    token = None
    if use_keyring or insecure_store_token:
        if token_stdin or insecure_store_token:
            token = sys.stdin.readline().strip()
        else:
            token = click.prompt("Token", hide_input=True)
        if not token:
            raise click.UsageError("empty token")
    if use_keyring:
        assert token is not None
        try:
            keyring_set(name, token)
        except ConfigError as error:
            raise click.ClickException(str(error)) from error
    config.profiles[name] = RemoteProfile(
        name=name,
        url=url.rstrip("/"),
        token_env=token_env,
        token_keyring=use_keyring,
        token=token if insecure_store_token else None,
    )
    config.save()
    click.echo(f"added profile {name} ({url}); token from {config.profiles[name].token_source}")


@profiles_group.command("remove")
@click.argument("name")
def remove_command(name: str) -> None:
    """Remove a profile."""
    config = _load()
    if config.profiles.pop(name, None) is None:
        raise click.ClickException(f"unknown profile {name!r}")
    config.save()
    click.echo(f"removed profile {name}")
