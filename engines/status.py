"""What state each language's engine is in, for `engines list` and the runtimes view."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from engines.cache import EngineCache
from engines.registry import LANGUAGES, language_engine, missing_requirements


class EngineState(Enum):
    READY = "ready"
    NOT_PREPARED = "not prepared"
    CANNOT_PREPARE = "cannot prepare"


@dataclass(frozen=True)
class EngineStatus:
    language: str
    engine: str
    version: str
    contexts: bool
    snapshots: bool
    state: EngineState
    detail: str = ""
    """Why the engine cannot be prepared, and how to fix it."""


def engine_status(language: str) -> EngineStatus:
    """The status of one language (never raises for a broken or missing engine)."""
    try:
        spec = language_engine(language)
    except Exception as error:  # an engine package that fails to import is reported, not fatal
        return EngineStatus(
            language,
            "",
            "",
            False,
            False,
            EngineState.CANNOT_PREPARE,
            f"engine unavailable: {error}",
        )
    cache = EngineCache(spec)
    if cache.is_ready():
        state, detail = EngineState.READY, ""
    else:
        missing = missing_requirements(spec)
        if missing:
            state = EngineState.CANNOT_PREPARE
            detail = "; ".join(
                f"{item.program} not found (needed to build the {language} engine): {item.fix}"
                for item in missing
            )
        else:
            state, detail = EngineState.NOT_PREPARED, ""
    return EngineStatus(
        language, spec.engine, spec.version, spec.contexts, spec.snapshots, state, detail
    )


def all_statuses() -> list[EngineStatus]:
    return [engine_status(language) for language in LANGUAGES]
