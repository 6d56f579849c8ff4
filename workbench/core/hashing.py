"""The workspace content hash ``hashBytes`` (spec 6.4): two 32-bit lanes, 16 hex digits.

Only a change detector. Pure CPython manages roughly 3-4 MB/s (measured on the dev
box); the lanes are computed in two separate tight loops because that beats one
combined loop by about 25 %. Callers must avoid re-hashing unchanged content: the
``Workspace`` caches each file's hash on its (immutable) ``bytes`` object.
"""

from __future__ import annotations

from typing import Final

__all__ = ["hash_bytes"]

_MASK: Final = 0xFFFFFFFF
_FNV_PRIME: Final = 0x01000193
_FNV_OFFSET: Final = 0x811C9DC5
_MIX: Final = 0x85EBCA6B


def hash_bytes(data: bytes | bytearray | memoryview) -> str:
    """``h1`` (FNV-1a) then ``h2`` (add-multiply seeded with the length), each 8 hex digits."""
    buf = bytes(data) if not isinstance(data, bytes) else data
    h1 = _FNV_OFFSET
    p = _FNV_PRIME
    m = _MASK
    for b in buf:
        h1 = ((h1 ^ b) * p) & m
    h2 = (_FNV_PRIME ^ len(buf)) & m
    q = _MIX
    for b in buf:
        h2 = ((h2 + b) * q) & m
    return f"{h1:08x}{h2:08x}"
