"""Backend profiles: `local` is built in; remote gateways are configured by the user."""

from __future__ import annotations

from pathlib import Path

from workbench.api.client import Backend
from workbench.config import Config, ConfigError

LOCAL = "local"


class UnknownProfileError(Exception):
    """The named profile is not configured (or cannot be used)."""


def profile_names(config: Config | None = None) -> list[str]:
    config = config or Config.load()
    return [LOCAL, *sorted(config.profiles)]


def open_profile_backend(name: str, *, data_dir: Path | None = None) -> Backend:
    """Open the backend of profile `name`."""
    if name == LOCAL:
        from workbench.backends.local import open_local_backend

        return open_local_backend(data_dir)
    try:
        config = Config.load()
        profile = config.profiles.get(name)
        if profile is None:
            known = ", ".join(profile_names(config))
            raise UnknownProfileError(f"unknown profile {name!r}; configured: {known}")
        token = profile.resolve_token()
    except ConfigError as error:
        raise UnknownProfileError(str(error)) from error
    from workbench.backends.remote import open_remote_backend

    return open_remote_backend(name, profile.url, token)
