"""Language names: one table of aliases (spec 2.2.1) for the CLI, the engines and the
gateway's `language` check."""

from __future__ import annotations

import pytest

from engines.registry import canonical_language, resolve_language


@pytest.mark.parametrize(
    ("name", "canonical", "engine"),
    [
        ("ts", "typescript", "javascript"),
        ("TypeScript", "typescript", "javascript"),
        ("node", "javascript", "javascript"),
        ("JS", "javascript", "javascript"),
        ("python3", "python", "python"),
        ("Perl", "perl", "perl"),
    ],
)
def test_an_alias_names_one_language_and_the_engine_that_runs_it(
    name: str, canonical: str, engine: str
) -> None:
    assert canonical_language(name) == canonical
    assert resolve_language(name) == engine


def test_an_unknown_language_is_named_in_the_error() -> None:
    with pytest.raises(KeyError, match="unknown language 'cobol'"):
        resolve_language("cobol")
