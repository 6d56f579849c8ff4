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

ALIASES: Final = {"python3": "python", "js": "javascript", "node": "javascript", "ts": "typescript"}
"""Other names of languages (spec 2.2.1): `ts` is TypeScript."""
HOSTS: Final = {"typescript": "javascript"}
"""Languages that run on another's engine: TypeScript on JavaScript's (spec 2.2.1)."""


def canonical_language(name: str) -> str:
    """A language name with its alias resolved (any case): `ts` → `typescript`."""
    return ALIASES.get(name.lower(), name.lower())


def resolve_language(name: str) -> str:
    """The language whose engine runs code in `name` (any case, aliases, TypeScript)."""
    language = canonical_language(name)
    language = HOSTS.get(language, language)
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
