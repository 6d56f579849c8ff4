"""gitignore semantics of the sync's ignore rules, on real files in a temp folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.sync import IgnoreRules, parse_ignore_lines


def ignored(lines: list[str], path: str, is_dir: bool = False) -> bool:
    verdict = False
    for rule in parse_ignore_lines(lines):
        if rule.matches(path, is_dir):
            verdict = not rule.negated
    return verdict


@pytest.mark.parametrize(
    ("pattern", "path", "is_dir", "expected"),
    [
        ("*.log", "a.log", False, True),
        ("*.log", "deep/er/a.log", False, True),
        ("*.log", "a.log.txt", False, False),
        ("/build", "build", True, True),
        ("/build", "src/build", True, False),
        ("build/", "src/build", True, True),
        ("build/", "src/build", False, False),
        ("doc/*.txt", "doc/a.txt", False, True),
        ("doc/*.txt", "doc/sub/a.txt", False, False),
        ("doc/*.txt", "x/doc/a.txt", False, False),
        ("**/foo", "a/b/foo", False, True),
        ("**/foo", "foo", False, True),
        ("a/**/b", "a/b", False, True),
        ("a/**/b", "a/x/y/b", False, True),
        ("out/**", "out/x/y", False, True),
        ("out/**", "out", True, False),
        ("file?.txt", "file1.txt", False, True),
        ("file?.txt", "file10.txt", False, False),
        ("[abc].md", "b.md", False, True),
        ("[!abc].md", "b.md", False, False),
        ("\\#hash", "#hash", False, True),
        ("# comment", "# comment", False, False),
        ("trailing   ", "trailing", False, True),
    ],
)
def test_pattern_semantics(pattern: str, path: str, is_dir: bool, expected: bool) -> None:
    assert ignored([pattern], path, is_dir) is expected


def test_negation_last_match_wins() -> None:
    assert ignored(["*.log", "!keep.log"], "keep.log") is False
    assert ignored(["*.log", "!keep.log"], "drop.log") is True
    assert ignored(["!keep.log", "*.log"], "keep.log") is True


def test_nested_gitignores_defaults_and_workbenchignore(tmp_path: Path) -> None:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / ".gitignore").write_text("*.tmp\nsecret/\n")
    (tmp_path / "sub" / ".gitignore").write_text("!important.tmp\n/local-only.txt\n")
    (tmp_path / ".workbenchignore").write_text("big-data/\n")
    rules = IgnoreRules(tmp_path)
    assert rules.is_ignored("a.tmp", False)
    assert rules.is_ignored("sub/deeper/a.tmp", False)
    assert not rules.is_ignored("sub/important.tmp", False)  # deeper negation wins
    assert rules.is_ignored("sub/local-only.txt", False)
    assert not rules.is_ignored("local-only.txt", False)  # anchored to sub/
    assert rules.is_ignored("secret/x.txt", False)  # inside an ignored directory
    assert rules.is_ignored("big-data", True)
    for default in (".git", "node_modules", "__pycache__", ".venv", "venv"):
        assert rules.is_ignored(f"{default}/x", False), default
    for default in ("a.swp", "notes.txt~", ".#lock", ".DS_Store", "sub/.DS_Store"):
        assert rules.is_ignored(default, False), default
    assert not rules.is_ignored("main.py", False)


def test_no_reinclusion_inside_an_ignored_directory(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("logs/\n!logs/keep.txt\n")
    rules = IgnoreRules(tmp_path)
    assert rules.is_ignored("logs/keep.txt", False)


def test_gitignore_can_reinclude_a_default(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("!venv/\n")
    assert not IgnoreRules(tmp_path).is_ignored("venv/lib.py", False)
