"""Runs the real python engine the way the framework does (engines/host.py); the
engine is prepared and compiled once through `engines.cache.EngineCache`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from engines.host import (
    OutputCapture,
)
from engines.language import GuestInstance
from engines.proto import envelope_pb2
from engines.python import (
    ENGINE,
)
from tests.engines.prepared import INIT_FUEL, Prepared, call_guest
from tests.engines.prepared import prepare_component as prepare_shared


def prepare_component() -> Prepared:
    return prepare_shared(ENGINE)


@dataclass
class Run:
    response: envelope_pb2.ExecuteResponse
    stdout: str
    stderr: str
    fuel_used: int

    @property
    def text(self) -> str | None:
        has = self.response.HasField("result") and self.response.result.HasField("text")
        return self.response.result.text if has else None

    @property
    def json(self) -> object:
        has = self.response.HasField("result") and self.response.result.HasField("json")
        return json.loads(self.response.result.json) if has else None

    @property
    def has_result(self) -> bool:
        return self.response.HasField("result")

    @property
    def error(self) -> envelope_pb2.GuestError | None:
        return self.response.error if self.response.HasField("error") else None


class Guest:
    """One store + live instance, created exactly like the framework does."""

    def __init__(self, prepared: Prepared, workspace: Path | None = None) -> None:
        self.output = OutputCapture()
        self.store = ENGINE.new_store(prepared.engine, self.output, workspace=workspace)
        self.store.set_fuel(INIT_FUEL)
        self.instance: GuestInstance = ENGINE.instantiate(
            prepared.engine, prepared.component, self.store
        )

    def call(self, request: envelope_pb2.ExecuteRequest, *, fuel: int | None = None) -> Run:
        done = call_guest(self.store, self.output, self.instance, request, fuel or ENGINE.fuel)
        return Run(done.response, done.stdout, done.stderr, done.fuel_used)

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

    def close(self) -> None:
        self.store.close()
