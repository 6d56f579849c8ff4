"""The local backend's engines: their state and preparation (in a worker thread)."""

from __future__ import annotations

import asyncio

from engines.cache import EngineCache
from engines.language import PrepareError
from engines.registry import language_engine
from engines.status import all_statuses
from workbench.api.engines import EngineInfo, EnginePrepareError, Progress


class LocalEngineManager:
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
