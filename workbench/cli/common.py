"""Options and helpers shared by the headless commands."""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import click

from workbench.api.client import Backend
from workbench.api.errors import SandboxError
from workbench.profiles import UnknownProfileError

P = ParamSpec("P")
T = TypeVar("T")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def backend_options(command: Callable[P, T]) -> Callable[P, T]:
    """`--profile` and `--data-dir`, accepted by every command that talks to a backend."""
    command = click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Local backend store (default: $SANDBOX_WORKBENCH_DATA_DIR or the user data dir).",
    )(command)
    command = click.option(
        "--profile",
        "-p",
        default="local",
        show_default=True,
        envvar="SANDBOX_WORKBENCH_PROFILE",
        help="Backend profile: `local` (embedded) or a configured remote gateway.",
    )(command)
    return command


def open_backend(profile: str, data_dir: Path | None) -> Backend:
    """The backend a profile names."""
    from workbench.profiles import open_profile_backend

    return open_profile_backend(profile, data_dir=data_dir)


def run_async(
    function: Callable[P, Coroutine[Any, Any, int | None]],
) -> Callable[P, None]:
    """Run an async command body; map backend errors to a clear message and exit code."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            code = asyncio.run(function(*args, **kwargs))
        except SandboxError as error:
            click.echo(f"error: {error.message} ({error.code}, HTTP {error.http_status})", err=True)
            sys.exit(EXIT_USAGE if 400 <= error.http_status < 500 else EXIT_FAILED)
        except UnknownProfileError as error:
            click.echo(f"error: {error}", err=True)
            sys.exit(EXIT_USAGE)
        except KeyboardInterrupt:
            sys.exit(130)
        sys.exit(code or EXIT_OK)

    return wrapper


async def with_backend(
    profile: str, data_dir: Path | None, body: Callable[[Backend], Awaitable[T]]
) -> T:
    backend = open_backend(profile, data_dir)
    try:
        return await body(backend)
    finally:
        await backend.aclose()


def echo_json(payload: Any) -> None:
    click.echo(json.dumps(payload, indent=2, ensure_ascii=False))
