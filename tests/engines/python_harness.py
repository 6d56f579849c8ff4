"""Runs the real python engine the way the framework does (engines/host.py); the
engine is prepared and compiled once through `engines.cache.EngineCache`.
"""

from __future__ import annotations

from dataclasses import dataclass

from engines.proto import envelope_pb2
from engines.python import ENGINE
from engines.vfs import VirtualFS
from tests.engines.prepared import ComponentGuest, ComponentRun, Prepared
from tests.engines.prepared import prepare_component as prepare_shared


def prepare_component() -> Prepared:
    return prepare_shared(ENGINE)


@dataclass
class Run(ComponentRun):
    stdout: str = ""
    stderr: str = ""


# The same shape as javascript_harness.Guest: only the `Run` it builds differs.
class Guest(ComponentGuest):
    """One store + live instance, created exactly like the framework does."""

    def __init__(self, prepared: Prepared, workspace: VirtualFS | None = None) -> None:
        super().__init__(ENGINE, prepared, workspace)

    def call(self, request: envelope_pb2.ExecuteRequest, *, fuel: int | None = None) -> Run:
        done = self.call_guest(request, fuel)
        return Run(done.response, done.fuel_used, done.stdout, done.stderr)

    def run(
        self,
        code: str,
        *,
        session: bool = False,
        env: dict[str, str] | None = None,
        cwd: str = "/workspace",
    ) -> Run:
        request = envelope_pb2.ExecuteRequest(
            code=code, env=env or {}, session=session, cwd=cwd if session else ""
        )
        return self.call(request)
