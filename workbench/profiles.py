"""Backend profiles: `local` is built in; remote gateways are configured by the user."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.config import (
    DEFAULT_TIMEOUT_S,
    LOCAL_PROFILE,
    TIMEOUT_ENV,
    Config,
    ConfigError,
    is_visible_ascii,
    parse_timeout,
    url_problem,
)

if TYPE_CHECKING:
    from engines.result import Limits
    from workbench.api import Backend

LOCAL = LOCAL_PROFILE
NO_DAEMON_ENV = "SANDBOX_WORKBENCH_NO_DAEMON"


class UnknownProfileError(Exception):
    """The named profile is not configured (or cannot be used)."""


class BackendUnavailableError(Exception):
    """The backend cannot be opened: the local store is unreadable, from a newer
    version, or its directory is unusable. The message says what to do."""


def profile_names(config: Config | None = None) -> list[str]:
    config = config or Config.load()
    return [LOCAL, *sorted(config.profiles)]


def open_profile_backend(
    name: str,
    *,
    data_dir: Path | None = None,
    timeout: float | None = None,
    embedded: bool | None = None,
    note: Callable[[str], None] | None = None,
    adopt: bool = False,
) -> Backend:
    """Open the backend of profile `name` (`note`: where a replaced daemon is told of;
    by default a warning on stderr). With `adopt` (a client reopening the local profile)
    the running daemon is taken whatever its settings, as `ensure_daemon` says.

    `timeout` (seconds; default `$SANDBOX_WORKBENCH_TIMEOUT_S`): on the local backend the
    engines' wall-clock limit per execution (30 s when neither is set); on a remote one
    how long to wait for an answer (120 s when neither is set), while the gateway
    enforces its own limit. The local backend is reached through its daemon unless
    `embedded` (default `$SANDBOX_WORKBENCH_NO_DAEMON`): then this process owns the store.
    """
    if timeout is None:
        timeout = configured_timeout()
    if note is None:
        from workbench.api.display import warn_untrusted  # not for --help: it loads the API

        note = warn_untrusted
    if name == LOCAL:
        if embedded is None:
            embedded = no_daemon_from_env()
        with opening_local_store(data_dir):
            if embedded:
                from workbench.backends.local import open_local_backend

                return open_local_backend(data_dir, embedded=True, limits=local_limits(timeout))
            from workbench.backends.daemon import open_daemon_backend

            return open_daemon_backend(
                data_dir,
                execution_timeout=DEFAULT_TIMEOUT_S if timeout is None else timeout,
                note=note,
                adopt=adopt,
            )
    try:
        config = Config.load()
    except ConfigError as error:
        raise UnknownProfileError(str(error)) from error
    profile = config.profiles.get(name)
    if profile is None:
        known = ", ".join(profile_names(config))
        raise UnknownProfileError(f"unknown profile {name!r}; configured: {known}")
    problem = url_problem(
        profile.url,
        allow_insecure=profile.allow_insecure,
        insecure_override="allow_insecure = true in the profile's table",
    )
    if problem is not None:
        raise UnknownProfileError(f"profile {name!r}: {problem}")
    try:
        token = profile.resolve_token()
    except ConfigError as error:
        prefix = f"profiles.{name}."
        typos = [key for key in config.unknown_keys if key.startswith(prefix)]
        hint = f" (unknown keys in {config.path}: {', '.join(typos)})" if typos else ""
        raise UnknownProfileError(f"{error}{hint}") from error
    if not is_visible_ascii(token):  # said without the token: it would go in a header
        raise UnknownProfileError(
            f"profile {name!r}: its token ({profile.token_source}) holds a space, a line end "
            "or a character outside visible ASCII, which no gateway can match"
        )
    from workbench.backends.remote import open_remote_backend

    return open_remote_backend(name, profile.url, token, wait_seconds=timeout)


def no_daemon_from_env() -> bool:
    """`$SANDBOX_WORKBENCH_NO_DAEMON` is set to something other than 0."""
    return os.environ.get(NO_DAEMON_ENV, "") not in ("", "0")


def configured_timeout() -> float | None:
    """`$SANDBOX_WORKBENCH_TIMEOUT_S` in seconds, None when unset; a bad value is a
    `ConfigError` naming the variable."""
    if not os.environ.get(TIMEOUT_ENV, "").strip():
        return None
    try:
        return parse_timeout(os.environ[TIMEOUT_ENV])
    except ValueError as error:
        raise ConfigError(str(error)) from None


def local_limits(timeout: float | None) -> Limits:
    """The local engines' limits with the wall-clock `timeout` (default 30 s)."""
    from engines.result import Limits

    return Limits(timeout_seconds=DEFAULT_TIMEOUT_S if timeout is None else timeout)


@contextmanager
def opening_local_store(data_dir: Path | None) -> Iterator[None]:
    """Turn the ways opening the local store fails into a `BackendUnavailableError`
    that says what to do."""
    from workbench.backends.daemon import DaemonStartError, UnsafeLocationError
    from workbench.backends.owner import StoreOwnedError
    from workbench.paths import DATABASE_NAME
    from workbench.paths import data_dir as resolve_data_dir

    database = resolve_data_dir(data_dir) / DATABASE_NAME
    try:
        yield
    except (StoreOwnedError, DaemonStartError, UnsafeLocationError) as error:
        raise BackendUnavailableError(str(error)) from error
    except Exception as error:
        from workbench.store import open_failure  # not before: it loads the engines

        message = open_failure(error, database)
        if message is None:
            raise
        raise BackendUnavailableError(message) from error
