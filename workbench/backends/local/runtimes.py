"""Local runtime "Workers": one binding per language, backed by the wasmtime engines.

Each mirrors a runtime Worker: its info (spec 2.2.2) and stateless execution (spec 2.2.1;
the request side is the routes'). `LocalEngineManager`: the engines' state and their
preparation, in a worker thread.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from engines.cache import EngineCache
from engines.language import LanguageEngine, PrepareError, Progress
from engines.process import Cancellation, EngineProcessDied, EngineProcessPool, run_stateless
from engines.registry import LANGUAGES, language_engine
from engines.result import ENGINE_ERROR, HOST_MESSAGE_CHARS, ExecutionError, ExecutionResult, Limits
from engines.status import all_statuses
from workbench.api.engines import EngineInfo, EnginePrepareError
from workbench.protocol.types import LOCAL_ONLY_CONTEXT_LANGUAGES, RuntimeInfo

EngineProgress = Callable[[str, str, float], None]
"""Hears (language, step, fraction done) while an engine is prepared on first use."""


@dataclass
class LocalRuntime:
    """A runtime binding (e.g. `PYTHON`) served by the local engine of its language."""

    binding: str
    language_engine: LanguageEngine
    limits: Limits
    engine_process_pool: EngineProcessPool
    prepare_progress: Progress | None = None
    """Hears about preparing this engine on its first use (e.g. `serve` prints it)."""
    contexts: bool = True
    """Code contexts are offered (spec 1.4: a binding that reports `contexts: false` runs
    statelessly, and creating a context for it is a 400)."""

    @property
    def language(self) -> str:
        return self.language_engine.language

    def build_sha256(self) -> str:
        """sha256 of the prepared engine Wasm (snapshots are only valid for that build)."""
        build = EngineCache(self.language_engine).build()
        return "" if build is None else build.identity

    def info(self) -> RuntimeInfo:
        return RuntimeInfo(
            self.binding, self.language_engine.language, self.language_engine.engine, self.contexts
        )

    def run_stateless(
        self,
        code: str,
        env_vars: dict[str, str],
        timeout: float | None = None,
        cancellation: Cancellation | None = None,
    ) -> ExecutionResult:
        """A fresh engine instance per call, in an engine process (`timeout`: its
        wall-clock limit instead of the backend's; `cancellation` cancels it); host
        failures become `EngineError` results."""
        started = time.perf_counter()
        limits = self.limits if timeout is None else replace(self.limits, timeout_seconds=timeout)
        try:
            return run_stateless(
                self.engine_process_pool,
                self.language_engine,
                code,
                env_vars,
                limits=limits,
                progress=self.prepare_progress,
                cancellation=cancellation,
            )
        except (PrepareError, EngineProcessDied) as error:
            return self.engine_error(code, f"{self.language} engine unavailable: {error}", started)

    def engine_error(
        self, code: str, message: str, started: float, name: str = ENGINE_ERROR
    ) -> ExecutionResult:
        """A run that failed before its engine ran it (an `EngineError` unless `name`)."""
        return ExecutionResult(
            code=code,
            language=self.language,
            engine=self.language_engine.engine,
            duration_ms=(time.perf_counter() - started) * 1000,
            error=ExecutionError(name, message[:HOST_MESSAGE_CHARS], []),
        )


def local_runtimes(
    engine_process_pool: EngineProcessPool,
    limits: Limits | None = None,
    prepare_progress: EngineProgress | None = None,
    *,
    ruby_contexts: bool = False,
) -> dict[str, LocalRuntime]:
    """The local bindings: JAVASCRIPT, PYTHON, PERL, RUBY (engines whose package loads);
    RUBY has code contexts only with `ruby_contexts` (a local extension)."""
    runtimes: dict[str, LocalRuntime] = {}
    for language in LANGUAGES:
        try:
            engine = language_engine(language)
        except Exception:  # an engine package that cannot load is simply not offered
            continue
        runtimes[language.upper()] = LocalRuntime(
            language.upper(),
            engine,
            limits or Limits(),
            engine_process_pool,
            None if prepare_progress is None else functools.partial(prepare_progress, language),
            engine.contexts and (language not in LOCAL_ONLY_CONTEXT_LANGUAGES or ruby_contexts),
        )
    return runtimes


class LocalEngineManager:
    """The local backend's engines: their state and preparation (in a worker thread)."""

    async def statuses(self) -> list[EngineInfo]:
        found = await asyncio.to_thread(all_statuses)
        return [
            EngineInfo(item.language, item.engine, item.version, item.state.value, item.detail)
            for item in found
        ]

    async def prepare(self, language: str, progress: Progress) -> None:
        try:
            spec = language_engine(language)
            await asyncio.to_thread(EngineCache(spec).prepare, progress)
        except (PrepareError, KeyError, ImportError) as error:
            raise EnginePrepareError(f"{language}: {error}") from error
