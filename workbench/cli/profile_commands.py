"""`sandbox-workbench profiles list | add | remove | show`."""

from __future__ import annotations

import sys

import click

from workbench.cli.common import EXIT_USAGE, note
from workbench.cli.completion import complete_profiles
from workbench.cli.errors import CommandError
from workbench.cli.terminal import echo_json, echo_untrusted, stdin_is_terminal
from workbench.config import (
    LOCAL_PROFILE,
    NO_KEYRING,
    Config,
    ConfigError,
    RemoteProfile,
    is_visible_ascii,
    keyring_available,
    keyring_delete,
    keyring_set,
    profile_problem,
    shown_url,
    url_problem,
)


def load_config() -> Config:
    """The config file, or a usage error naming the problem; unknown keys are noted."""
    try:
        config = Config.load()
    except ConfigError as error:
        raise CommandError(str(error), EXIT_USAGE) from error
    if config.unknown_keys:
        note(f"note: {config.path}: unknown keys ignored: {', '.join(config.unknown_keys)}")
    return config


def save_config(config: Config) -> None:
    try:
        config.save()
    except ConfigError as error:
        raise CommandError(str(error), EXIT_USAGE) from error


def _profile_json(profile: RemoteProfile) -> dict[str, object]:
    return {
        "name": profile.name,
        "kind": "remote",
        "url": shown_url(profile.url),
        "token": profile.token_source,
    }


@click.group("profiles")
def profiles_group() -> None:
    """Configure remote gateways (the `local` profile is built in)."""


@profiles_group.command(
    "list",
    epilog="""\b
Examples:
  sandbox-workbench profiles list
  sandbox-workbench profiles list --json | jq -r '.[].name'""",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_command(as_json: bool) -> None:
    """List profiles (never their tokens)."""
    config = load_config()
    remotes = sorted(config.profiles.values(), key=lambda profile: profile.name)
    if as_json:
        local = {"name": LOCAL_PROFILE, "kind": "local"}
        echo_json([local, *(_profile_json(profile) for profile in remotes)])
        return
    echo_untrusted(f"{LOCAL_PROFILE}\tembedded local backend")
    for profile in remotes:
        echo_untrusted(f"{profile.name}\t{shown_url(profile.url)}\ttoken: {profile.token_source}")


@profiles_group.command(
    "show",
    epilog="""\b
Examples:
  sandbox-workbench profiles show staging""",
)
@click.argument("name", shell_complete=complete_profiles)
def show_command(name: str) -> None:
    """Show one profile as JSON (never its token)."""
    config = load_config()
    if name == LOCAL_PROFILE:
        echo_json({"name": LOCAL_PROFILE, "kind": "local"})
        return
    profile = config.profiles.get(name)
    if profile is None:
        raise CommandError(f"unknown profile {name!r}", EXIT_USAGE)
    echo_json(_profile_json(profile))


@profiles_group.command(
    "add",
    epilog="""\b
Examples:
  sandbox-workbench profiles add staging --url https://gw.example.workers.dev \\
      --token-env STAGING_TOKEN
  sandbox-workbench profiles add prod --url https://gw.example.com --keyring
  sandbox-workbench profiles add dev --url http://127.0.0.1:8787 --token-env DEV_TOKEN""",
)
@click.argument("name")
@click.option("--url", required=True, help="The gateway's base URL (https://…).")
@click.option("--token-env", help="Read the token from this environment variable.")
@click.option(
    "--keyring",
    "use_keyring",
    is_flag=True,
    help="Store the token in the OS keyring (prompted on a terminal, else read from stdin).",
)
@click.option(
    "--token-stdin",
    is_flag=True,
    help="Read the token for --keyring or --insecure-store-token from stdin.",
)
@click.option(
    "--insecure-store-token",
    is_flag=True,
    help="Store the token in the config file in plain text (prompted without echo on a "
    "terminal, else read from stdin).",
)
@click.option(
    "--allow-insecure",
    is_flag=True,
    help="Allow a plain http:// URL to a host other than this machine (sends the token "
    "in clear text).",
)
@click.option("--force", is_flag=True, help="Replace an existing profile of that name.")
def add_command(
    name: str,
    url: str,
    token_env: str | None,
    use_keyring: bool,
    token_stdin: bool,
    insecure_store_token: bool,
    allow_insecure: bool,
    force: bool,
) -> None:
    """Add a remote profile. The token comes from an env var or the OS keyring.

    Plain http:// is for a `serve` on this machine (loopback) only, unless
    --allow-insecure.
    """
    problem = profile_problem(name, token_env)
    if problem is not None:
        raise click.UsageError(problem)
    problem = url_problem(url, allow_insecure=allow_insecure)
    if problem is not None:
        raise click.BadParameter(problem, param_hint="--url")
    sources = sum([bool(token_env), use_keyring, insecure_store_token])
    if sources != 1:
        raise click.UsageError("choose one of --token-env VAR, --keyring, --insecure-store-token")
    if token_stdin and token_env:  # the token it would read went nowhere, unsaid (QA)
        raise click.UsageError("--token-stdin goes with --keyring or --insecure-store-token")
    config = load_config()
    if name in config.profiles and not force:
        raise CommandError(f"profile {name!r} exists (use --force to replace it)", EXIT_USAGE)
    token = None
    if use_keyring and not keyring_available():  # said before a token is asked for (QA)
        raise CommandError(f"{NO_KEYRING}; use --token-env instead")
    if use_keyring or insecure_store_token:
        # A terminal gets a prompt that does not echo (it waited, unprompted, echoing the
        # token as it was typed; QA); a pipe is read (a prompt on it warned that it may
        # echo; QA).
        from_stdin = token_stdin or not stdin_is_terminal()
        if from_stdin:
            token = "" if sys.stdin is None else sys.stdin.readline().strip()  # closed: none
        elif sys.stdin is None:  # the prompt reads stdin too (review)
            token = ""
        else:
            token = click.prompt("Token", hide_input=True)
        if not token:
            raise click.UsageError("empty token")
        if not is_visible_ascii(token):  # said without it
            raise CommandError(
                "the token holds a space or a character outside visible ASCII, which no "
                "header can carry; nothing was stored",
                EXIT_USAGE,
            )
    if use_keyring:
        assert token is not None
        try:
            keyring_set(name, token)
        except ConfigError as error:
            raise CommandError(str(error)) from error
    config.profiles[name] = RemoteProfile(
        name=name,
        url=url.rstrip("/"),
        token_env=token_env,
        token_keyring=use_keyring,
        token=token if insecure_store_token else None,
        allow_insecure=allow_insecure,
    )
    save_config(config)
    echo_untrusted(f"added profile {name} ({url}); token from {config.profiles[name].token_source}")


@profiles_group.command(
    "remove",
    epilog="""\b
Examples:
  sandbox-workbench profiles remove staging""",
)
@click.argument("name", shell_complete=complete_profiles)
def remove_command(name: str) -> None:
    """Remove a profile, and its token from the OS keyring if it is kept there."""
    if name == LOCAL_PROFILE:
        raise CommandError(
            f"the {LOCAL_PROFILE} profile is built in and cannot be removed", EXIT_USAGE
        )
    config = load_config()
    profile = config.profiles.pop(name, None)
    if profile is None:
        raise CommandError(f"unknown profile {name!r}", EXIT_USAGE)
    save_config(config)
    echo_untrusted(f"removed profile {name}")
    if profile.token_keyring:
        try:
            deleted = keyring_delete(name)
        except ConfigError as error:
            raise CommandError(f"{error}; delete its token there yourself") from error
        note("deleted its token from the OS keyring" if deleted else "no token in the keyring")
