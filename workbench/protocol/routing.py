"""A route table: method and path pattern → whatever the caller dispatches to.

Patterns are paths with parameters: ``/{name}`` is one segment (possibly empty), and
``/{name...}`` is the rest of the path, slashes included; it may also be absent together
with its slash, so ``/contexts/{id...}/history`` matches ``/contexts/history`` with an
empty id, exactly as the prefix-and-suffix tests it replaced did. Parameters come back
still percent-encoded: each handler decodes what it takes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from workbench.protocol.errors import SandboxError
from workbench.protocol.http import not_found

__all__ = ["Found", "Route", "RouteTable"]

Target = TypeVar("Target")

_PARAMETER = re.compile(r"/\{(\w+)(\.\.\.)?\}")


def _compile(pattern: str) -> re.Pattern[str]:
    parts, last = [], 0
    for match in _PARAMETER.finditer(pattern):
        parts.append(re.escape(pattern[last : match.start()]))
        name, rest = match.group(1), match.group(2)
        parts.append(f"(?:/(?P<{name}>.*))?" if rest else f"/(?P<{name}>[^/]*)")
        last = match.end()
    parts.append(re.escape(pattern[last:]))
    return re.compile("".join(parts))


@dataclass(frozen=True)
class Route(Generic[Target]):
    method: str
    pattern: str
    target: Target
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", _compile(self.pattern))


@dataclass(frozen=True)
class Found(Generic[Target]):
    target: Target
    params: dict[str, str]
    """Raw (percent-encoded) parameters; an absent ``{name...}`` is ``""``."""


class RouteTable(Generic[Target]):
    """Routes tried in order; the first whose pattern and method match wins."""

    def __init__(
        self, routes: Iterable[Route[Target]], *, wrong_method: Callable[[], SandboxError]
    ) -> None:
        self.routes = tuple(routes)
        self._wrong_method = wrong_method
        """The error for a known path asked with another method (405, or 404 to hide it)."""

    def find(self, method: str, path: str) -> Found[Target] | SandboxError:
        """The route for `method` and `path`, or the error to answer (wrong method, or
        the protocol's 404 "Not found" for an unknown path)."""
        path_known = False
        for route in self.routes:
            match = route.regex.fullmatch(path)
            if match is None:
                continue
            if route.method == method:
                params = {name: value or "" for name, value in match.groupdict().items()}
                return Found(route.target, params)
            path_known = True
        return self._wrong_method() if path_known else not_found()

    def methods(self, path: str) -> tuple[str, ...]:
        """The methods `path` is served for, in table order (a 405's `Allow`)."""
        found = [route.method for route in self.routes if route.regex.fullmatch(path)]
        return tuple(dict.fromkeys(found))
