"""Local runtime "Workers": one binding per language, backed by the wasmtime engines.

Each mirrors a runtime Worker's observable surface: `GET /interpreter` info (spec 2.2.2)
and stateless `POST /execute` with its exact validation order (spec 2.2.1).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from engines.cache import EngineCache
from engines.isolated import WorkerPool, run_isolated
from engines.isolated.process import WorkerDied
from engines.language import LanguageEngine, PrepareError
from engines.registry import LANGUAGES, language_engine
from engines.result import ExecutionError, ExecutionResult
from engines.session import Limits
from workbench.api.errors import SandboxError
from workbench.api.transport import Response
from workbench.api.types import RuntimeInfo
from workbench.core.envvars import runtime_env_vars
from workbench.gateway.http import (
    EXECUTE_BODY_CAP,
    Request,
    error_json,
    internal_error,
    parse_object,
    validate_code,
    validation_error,
)

LANGUAGE_ALIASES = {
    "python3": "python",
    "js": "javascript",
    "node": "javascript",
    "ts": "typescript",
}
HOST_MESSAGE_CHARS = 2048


@dataclass
class LocalRuntime:
    """A runtime binding (e.g. `PYTHON`) served by the local engine of its language."""

    binding: str
    spec: LanguageEngine
    limits: Limits
    engine_pool: WorkerPool

    @property
    def language(self) -> str:
        return self.spec.language

    def build_sha256(self) -> str:
        """sha256 of the prepared engine Wasm (snapshots are only valid for that build)."""
        build = EngineCache(self.spec).build()
        return "" if build is None else build.identity

    def info(self) -> RuntimeInfo:
        return RuntimeInfo(self.binding, self.spec.language, self.spec.engine, self.spec.contexts)

    def _language_error(self, body: dict[str, Any]) -> SandboxError | None:
        if "language" not in body:
            return None
        language = body["language"]
        if not isinstance(language, str):
            return validation_error("language must be a string")
        resolved = LANGUAGE_ALIASES.get(language.lower(), language.lower())
        if resolved == self.language or (
            resolved == "typescript" and self.language == "javascript"
        ):
            return None
        return validation_error(
            f"Unsupported language '{language}' on this runtime ({self.language})"
        )

    async def execute(self, request: Request) -> Response:
        """Stateless `POST /execute` (spec 2.2.1)."""
        content_type = request.headers.get("content-type", "").lower()
        if not content_type.startswith("application/json"):
            return error_json(validation_error("Content-Type must be application/json", 415))
        if not request.body:
            declared = request.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > EXECUTE_BODY_CAP:
                return error_json(validation_error("Request too large", 413))
            return error_json(validation_error("JSON body required"))
        try:
            body = parse_object(request, EXECUTE_BODY_CAP)
            if "input" in body:
                raise validation_error("input is no longer supported; pass data with envVars")
            language_error = self._language_error(body)
            if language_error is not None:
                raise language_error
            code = validate_code(body)
            env_vars = runtime_env_vars(body) or {}
        except SandboxError as error:
            return error_json(error)
        try:
            result = await asyncio.to_thread(self.run_stateless, code, env_vars)
        except Exception:  # anything unexpected before the engine answered (spec 2.2.1)
            return internal_error("Engine execution failed", 502)
        return Response.json(200, result.to_json())

    def run_stateless(self, code: str, env_vars: dict[str, str]) -> ExecutionResult:
        """A fresh engine instance per call, in an engine process; host failures become
        `EngineError` results."""
        started = time.perf_counter()
        try:
            return run_isolated(self.engine_pool, self.spec, code, env_vars, limits=self.limits)
        except (PrepareError, WorkerDied) as error:
            return self.engine_error(code, f"{self.language} engine unavailable: {error}", started)

    def engine_error(self, code: str, message: str, started: float) -> ExecutionResult:
        return ExecutionResult(
            code=code,
            language=self.language,
            engine=self.spec.engine,
            duration_ms=(time.perf_counter() - started) * 1000,
            error=ExecutionError("EngineError", message[:HOST_MESSAGE_CHARS], []),
        )


def local_runtimes(
    engine_pool: WorkerPool, limits: Limits | None = None
) -> dict[str, LocalRuntime]:
    """The local bindings: JAVASCRIPT, PYTHON, PERL, RUBY (engines whose package loads)."""
    runtimes: dict[str, LocalRuntime] = {}
    for language in LANGUAGES:
        try:
            spec = language_engine(language)
        except Exception:  # an engine package that cannot load is simply not offered
            continue
        runtimes[language.upper()] = LocalRuntime(
            language.upper(), spec, limits or Limits(), engine_pool
        )
    return runtimes
