"""Backend profiles: `local` is built in; remote gateways are configured by the user."""

from __future__ import annotations

from pathlib import Path

from workbench.api.client import Backend

LOCAL = "local"


class UnknownProfileError(Exception):
    """The named profile is not configured."""


def open_profile_backend(name: str, *, data_dir: Path | None = None) -> Backend:
    """Open the backend of profile `name`."""
    if name == LOCAL:
        from workbench.backends.local import open_local_backend

        return open_local_backend(data_dir)
    raise UnknownProfileError(f"unknown profile {name!r}; `local` is the only profile so far")
