"""`sandbox-workbench gateway init DIR`: render the gateway and runtime Worker templates."""

from __future__ import annotations

import os
import re
import secrets
import shlex
from pathlib import Path

import click

from workbench.api.display import counted
from workbench.cli.common import EXIT_USAGE, note
from workbench.cli.errors import CommandError
from workbench.cli.profile_commands import load_config, save_config
from workbench.cli.terminal import echo_untrusted
from workbench.config import (
    ConfigError,
    RemoteProfile,
    keyring_available,
    keyring_set,
    profile_problem,
    url_problem,
)

DEV_VARS = ".dev.vars"


@click.group("gateway")
def gateway_group() -> None:
    """Deploy the workbench gateway Worker (templates in worker_templates/)."""


@gateway_group.command(
    "init",
    epilog="""\b
Examples:
  sandbox-workbench gateway init deploy
  sandbox-workbench gateway init deploy --bindings PYTHON,PERL \\
      --url https://sandbox-workbench-gateway.you.workers.dev
  sandbox-workbench gateway init deploy --bindings PYTHON,SCRATCH=python \\
      --name-prefix acme --service SCRATCH=acme-scratchpad --stateless""",
)
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--bindings",
    default="JAVASCRIPT,PYTHON,PERL,RUBY",
    show_default=True,
    help="Runtime bindings to deploy (comma-separated): a language (PYTHON), or "
    "NAME=language for a binding name of your choice.",
)
@click.option(
    "--name-prefix",
    metavar="PREFIX",
    help="Name the Workers PREFIX-<binding> and PREFIX-gateway "
    "(default: sandbox-<binding> and sandbox-workbench-gateway).",
)
@click.option(
    "--service",
    "services",
    multiple=True,
    metavar="BINDING=NAME",
    help="The Worker name of one binding's runtime (repeatable; wins over --name-prefix).",
)
@click.option(
    "--stateless",
    is_flag=True,
    help="Render every runtime stateless: no Interpreter Durable Object, no code contexts.",
)
@click.option(
    "--profile",
    "profile_name",
    default="gateway",
    show_default=True,
    help="Name of the profile to add.",
)
@click.option("--url", help="The deployed gateway's URL (add the profile now; else later).")
@click.option(
    "--force",
    is_flag=True,
    help="Replace an existing profile of that name (its URL, token source and stored token).",
)
def init_command(
    directory: Path,
    bindings: str,
    name_prefix: str | None,
    services: tuple[str, ...],
    stateless: bool,
    profile_name: str,
    url: str | None,
    force: bool,
) -> None:
    """Render the gateway and runtime Workers into DIRECTORY with a fresh token.

    Every Worker pins the one tested set of @sandbox-workers versions
    (worker_templates/versions.json) and its build refuses any other. The token is written
    to DIRECTORY/gateway/.dev.vars (mode 600, git-ignored; wrangler reads it for
    `wrangler dev`) and, where the OS has a keyring, stored there for the profile. It is
    never printed.
    """
    from workbench.deploy.templates import plan_runtimes, render, templates_root
    from workbench.deploy.versions import CORE_PACKAGE, load_versions, runtime_package

    for part in (directory, *directory.parents):  # a raw errno said so (QA, review)
        if part.is_symlink() and not part.exists():
            raise click.BadParameter(f"{part} is a symlink to nothing", param_hint="DIRECTORY")
    if (problem := profile_problem(profile_name)) is not None:
        raise click.BadParameter(problem, param_hint="--profile")
    if (
        url is not None
        and (problem := url_problem(url, allow_insecure=False, insecure_override=None)) is not None
    ):
        raise click.BadParameter(problem, param_hint="--url")
    replaced = url is not None or keyring_available()  # else nothing of it is touched (QA)
    if replaced and profile_name in load_config().profiles and not force:
        # Its URL, token source and keyring token would all be replaced.
        raise CommandError(
            f"profile {profile_name!r} exists (use --force to replace it, or choose "
            "another --profile)",
            EXIT_USAGE,
        )
    named: dict[str, str] = {}
    for entry in services:
        binding, separator, name = entry.partition("=")
        if not separator or not binding.strip() or not name.strip():
            raise click.BadParameter(f"{entry!r} is not BINDING=NAME", param_hint="--service")
        named[binding.strip()] = name.strip()
    chosen = [name for name in bindings.split(",") if name.strip()]
    try:  # what the flags ask for: a binding, a Worker name, a directory to fill
        workers = plan_runtimes(
            chosen, name_prefix=name_prefix, services=named, stateless=stateless
        )
    except ValueError as error:
        raise CommandError(str(error), EXIT_USAGE) from error
    try:  # the installation's pins and templates
        versions = load_versions(templates_root())
    except (ValueError, FileNotFoundError) as error:
        raise CommandError(str(error)) from error
    dev_vars = directory / "gateway" / DEV_VARS
    if os.path.lexists(dev_vars):  # before anything is written (the rest was, then; QA)
        raise CommandError(f"Refusing to overwrite {dev_vars}; choose a directory without it")
    try:
        written = render(
            directory, chosen, name_prefix=name_prefix, services=named, stateless=stateless
        )
    except ValueError as error:  # what the flags name
        raise CommandError(str(error), EXIT_USAGE) from error
    except (FileExistsError, FileNotFoundError) as error:  # files in the way; no templates
        raise CommandError(str(error)) from error
    token = secrets.token_urlsafe(32)
    descriptor = os.open(dev_vars, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(f"WORKBENCH_TOKEN={token}\n")
    echo_untrusted(f"rendered {counted(len(written), 'file')} into {directory}")
    languages = sorted({worker.language for worker in workers})
    pinned = [f"{CORE_PACKAGE} {versions.core}"]
    pinned += [
        f"{runtime_package(language)} {versions.runtime(language)}" for language in languages
    ]
    echo_untrusted(f"pinned: {', '.join(pinned)}")

    env_name = "WORKBENCH_TOKEN_" + re.sub(r"[^A-Za-z0-9]", "_", profile_name).upper()
    in_keyring = False
    if keyring_available():
        try:
            keyring_set(profile_name, token)
            in_keyring = True
        except ConfigError as error:
            note(f"note: {error}")
    if url:
        config = load_config()
        config.profiles[profile_name] = RemoteProfile(
            name=profile_name,
            url=url.rstrip("/"),
            token_env=None if in_keyring else env_name,
            token_keyring=in_keyring,
        )
        save_config(config)
        echo_untrusted(f"added profile {profile_name} ({url})")
    gateway_dir = (directory / "gateway").absolute()  # the steps hold after their `cd`
    runtimes = ", ".join(
        f"{(directory / worker.directory).absolute()}/ (Worker {worker.name}"
        + ("" if worker.contexts else ", stateless")
        + ")"
        for worker in workers
    )
    steps = [
        f"deploy each runtime Worker first, as its README says: {runtimes}",
        f"cd {shlex.quote(str(gateway_dir))} && npm ci && npm install --no-save "
        f"{CORE_PACKAGE}@{versions.core}",
        f"grep WORKBENCH_TOKEN {DEV_VARS} | cut -d= -f2- | npx wrangler secret put WORKBENCH_TOKEN",
        "npx wrangler deploy",
    ]
    if not url:
        source = "--keyring" if in_keyring else f"--token-env {env_name}"
        # A profile of that name is kept as it is until then (review).
        replace = " --force" if profile_name in load_config().profiles else ""
        steps.append(
            f"sandbox-workbench profiles add {profile_name} --url <the deployed URL> {source}"
            + replace
        )
    if not in_keyring:
        steps.append(
            f"export {env_name}=$(grep WORKBENCH_TOKEN "
            f"{shlex.quote(str(gateway_dir / DEV_VARS))} | cut -d= -f2-)"
        )
    echo_untrusted("next steps:")
    for number, step in enumerate(steps, 1):
        echo_untrusted(f"  {number}. {step}")
