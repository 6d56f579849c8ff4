"""A WASI 0.2 host written against the canonical ABI of core functions.

Each lowered import of a decomposed component is bound to one handler here, which takes
the core parameters exactly as lowered (`abi.implements` records its core signature, and
decomposing a component checks every import against it). The host's state (`WasiHost`)
is plain data plus the open host files, so it can be snapshotted with the guest.
"""

from __future__ import annotations

# Importing the handler modules registers their handlers in `IMPORTS`.
from engines.components.wasi import cli, filesystem, sockets, streams  # noqa: F401
from engines.components.wasi.abi import IMPORTS, HostImport
from engines.components.wasi.sockets import DENIED_INTERFACES

SUPPORTED_VERSION_PREFIX = "0.2."


class UnsupportedImport(ValueError):
    """A component imports something this host does not provide."""


def lookup(interface: str, function: str) -> HostImport | None:
    """The implementation of `interface#function` (interface with its @version); None for
    a denied import that can never be reached (it traps if called)."""
    name, _, version = interface.partition("@")
    if not version.startswith(SUPPORTED_VERSION_PREFIX):
        raise UnsupportedImport(f"{interface}: only WASI {SUPPORTED_VERSION_PREFIX}x is provided")
    found = IMPORTS.get(f"{name}#{function}")
    if found is not None:
        return found
    if name.startswith(DENIED_INTERFACES):
        return None
    raise UnsupportedImport(f"{name}#{function} is not provided by the WASI host")
