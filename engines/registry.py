"""The languages we ship and their engine descriptions (imported lazily)."""

from __future__ import annotations

import importlib
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from engines.language import LanguageEngine

LANGUAGES: Final = ("javascript", "python", "perl", "ruby")
"""Every language, in the order sandbox-workers lists them and users see them: the local
engines (one package each under `engines/`) and the runtime Worker templates."""

ALIASES = {"js": "javascript", "node": "javascript", "ts": "javascript", "python3": "python"}


def resolve_language(name: str) -> str:
    """Map a user-typed language name (any case, common aliases) to a language id."""
    language = ALIASES.get(name.lower(), name.lower())
    if language not in LANGUAGES:
        raise KeyError(f"unknown language {name!r}; choose one of {', '.join(LANGUAGES)}")
    return language


def language_engine(language: str) -> LanguageEngine:
    """The `ENGINE` of `engines/<language>/`."""
    from engines.language import LanguageEngine  # wasmtime: only when an engine is needed

    module = importlib.import_module(f"engines.{resolve_language(language)}")
    engine = module.ENGINE
    if not isinstance(engine, LanguageEngine):
        raise TypeError(f"engines.{language}.ENGINE is not a LanguageEngine")
    return engine


@dataclass(frozen=True)
class MissingRequirement:
    program: str
    fix: str


def missing_requirements(engine: LanguageEngine) -> list[MissingRequirement]:
    """Host programs the engine needs for preparing that are not on PATH."""
    fixes = {
        "npm": "install Node.js with npm (https://nodejs.org or your package manager)",
        "node": "install Node.js with npm (https://nodejs.org or your package manager)",
    }
    return [
        MissingRequirement(program, fixes.get(program, f"install {program}"))
        for program in engine.requirements
        if shutil.which(program) is None
    ]
