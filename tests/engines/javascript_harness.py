"""Runs the real javascript engine the way the framework does (engines/host.py); the
engine is prepared and compiled once through `engines.cache.EngineCache`.
"""

from __future__ import annotations

from engines.javascript import ENGINE
from engines.proto import envelope_pb2
from engines.vfs import VirtualFS
from tests.engines.prepared import ComponentGuest, ComponentRun, Prepared
from tests.engines.prepared import prepare_component as prepare_shared


def prepare_component() -> Prepared:
    return prepare_shared(ENGINE)


class Run(ComponentRun):
    """JavaScript's logs travel in the envelope's `console`, not through WASI stdout."""

    @property
    def stdout(self) -> list[str]:
        return [line.text for line in self.response.console if line.stream == 0]

    @property
    def stderr(self) -> list[str]:
        return [line.text for line in self.response.console if line.stream == 1]


class Guest(ComponentGuest):
    """One store + live instance, created exactly like the framework does."""

    def __init__(self, prepared: Prepared, workspace: VirtualFS | None = None) -> None:
        super().__init__(ENGINE, prepared, workspace)

    def call(self, request: envelope_pb2.ExecuteRequest, *, fuel: int | None = None) -> Run:
        done = self.call_guest(request, fuel)
        return Run(done.response, done.fuel_used)

    def run(
        self,
        code: str,
        *,
        session: bool = False,
        env: dict[str, str] | None = None,
        cwd: str = "/workspace",
        result_limit: int = 65536,
        console_units: int = 32768,
        console_entries: int = 200,
    ) -> Run:
        request = envelope_pb2.ExecuteRequest(
            code=code,
            env=env or {},
            session=session,
            cwd=cwd if session else "",
            result_limit=result_limit,
            console_limit_units=console_units,
            console_limit_entries=console_entries,
        )
        return self.call(request)
