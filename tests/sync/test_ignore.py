"""gitignore semantics of the sync's ignore rules, on real files in a temp folder, and
compared with git itself (`git check-ignore`) for tricky patterns."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from workbench.sync import IgnoreRules, compile_ignore_lines
from workbench.sync.ignore import rules_verdict


def ignored(lines: list[str], path: str, is_dir: bool = False) -> bool:
    return bool(rules_verdict(compile_ignore_lines(lines), path, is_dir))


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
        ("[]a]", "]", False, True),
        ("[]a]", "a", False, True),
        ("[]a]", "b", False, False),
        ("[]x]*", "x1", False, True),
        ("[]x]*", "y1", False, False),
        ("\\#hash", "#hash", False, True),
        ("# comment", "# comment", False, False),
        ("trailing   ", "trailing", False, True),
        ("trailing\\", "trailing", False, False),
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


def test_secrets_are_ignored_by_default(tmp_path: Path) -> None:
    rules = IgnoreRules(tmp_path)
    for secret in (".env", "app/.env", "server.pem", "deploy/key.pem", "id_ed25519", "id_rsa.pub"):
        assert rules.is_ignored(secret, False), secret
    assert rules.is_ignored(".ssh/config", False)
    assert rules.is_ignored("home/.ssh", True)
    for ordinary in (".env.example", "pem.txt", "identity.py", "ssh/config"):
        assert not rules.is_ignored(ordinary, False), ordinary


def test_no_reinclusion_inside_an_ignored_directory(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("logs/\n!logs/keep.txt\n")
    rules = IgnoreRules(tmp_path)
    assert rules.is_ignored("logs/keep.txt", False)


def test_gitignore_can_reinclude_a_default(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("!venv/\n!.env\n")
    rules = IgnoreRules(tmp_path)
    assert not rules.is_ignored("venv/lib.py", False)
    assert not rules.is_ignored(".env", False)


def test_a_symlinked_rule_file_pointing_outside_is_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("*.py\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / ".gitignore").symlink_to(outside)
    assert not IgnoreRules(folder).is_ignored("main.py", False)


GIT_FILES = [
    "a.log", "b.txt", "x1", "]y", "y", "#hash", "!imp", "a*b", "axb", "trailing ", "[",
    "docs/a.txt", "docs/keep.txt", "d/keep.txt", "d/sub/f.c", "out/x/y", "out/.gitkeep",
    "build/out.o", "src/build/z", "foo/a", "foo/bar/hello.c", "logs/keep.txt",
    "deep/er/a.log", "a/b", "a/x/y/b", "sub/local.txt", "sub/deeper/a.tmp",
    "sub/important.tmp", "e/f/g/h.txt",
]  # fmt: skip
GIT_DIRS = ["emptydir", "a.logdir", "foo/emptysub"]
TRICKY_GITIGNORES = [
    "[]a]\n",
    "[]x]*\n",
    "out/**\n!out/.gitkeep\n",
    "d/**\n!d/keep.txt\n",
    "d/\n!d/keep.txt\n",
    "logs/\n!logs/keep.txt\n",
    "build/\n/a\n",
    "doc*/*.txt\n**/foo\n",
    "a/**/b\ne/**/h.txt\n",
    "\\#hash\n\\!imp\na\\*b\ntrailing\\ \n",
    "[!a]*\n!*/\n",
    "*.txt\n!docs\n",
    "foo/*\n",
    "foo/**/\n",
    "*\n!*/\n!*.txt\n",
    "/*\n!/foo\n/foo/*\n!/foo/bar\n",
    "**/x/**\n*/\n",
    "[\n*.log\n!a.log\n",
]
SUB_GITIGNORES = [None, "!important.tmp\n/local.txt\n", "*\n!*.tmp\n"]


GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git_repo(root: Path, files: list[str], directories: list[str]) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=GIT_ENV)
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")
    for name in directories:
        (root / name).mkdir(parents=True, exist_ok=True)


def differences_from_git(root: Path) -> list[str]:
    """The entries of `root` whose verdict differs from `git check-ignore`'s."""
    entries = [
        (path.relative_to(root).as_posix(), path.is_dir())
        for path in root.rglob("*")
        if ".git" not in path.relative_to(root).parts[:1] and path.name != ".gitignore"
    ]
    completed = subprocess.run(
        ["git", "-C", str(root), "check-ignore", "--stdin", "-z"],
        input="\0".join(path for path, _ in entries) + "\0",
        capture_output=True,
        text=True,
        env=GIT_ENV,
    )
    by_git = {path for path in completed.stdout.split("\0") if path}
    rules = IgnoreRules(root, use_defaults=False)
    return [path for path, is_dir in entries if rules.is_ignored(path, is_dir) != (path in by_git)]


@needs_git
@pytest.mark.parametrize("gitignore", TRICKY_GITIGNORES)
def test_agrees_with_git_check_ignore(tmp_path: Path, gitignore: str) -> None:
    for index, sub in enumerate(SUB_GITIGNORES):
        root = tmp_path / f"repo{index}"
        git_repo(root, GIT_FILES, GIT_DIRS)
        (root / ".gitignore").write_text(gitignore)
        if sub is not None:
            (root / "sub" / ".gitignore").write_text(sub)
        assert not differences_from_git(root), (gitignore, sub)


WILDMATCH_FILES = [
    "a", "b", "c", "-", "]", "1x", "X", "a b", "é.txt", "e.txt", "[x", "[x]", "deep",
    "q/deep", "q/r/deep", "x/y", "x/1/2/y", "a2/b", "a2/x/y/b", "a2x/y/b", "keep.log",
    "drop.log", "tab\t", "foo", "d/e/f", "A\x0cB", "bom",
]  # fmt: skip
WILDMATCH_DIRS = ["emptydir", "q/r/deepdir"]
WILDMATCH_GITIGNORES = [
    "[b-a]\n[]-a]\n",  # a reversed range matches its first character; `]` first is literal
    "[a-]\n",
    "a2**/b\n",  # after the literal prefix, `**/` spans directories (git's quirk)
    "a2/**/b\n",
    "[[:digit:]]*\n[[:upper:]]\n",
    "*[[:space:]]*\n",
    "[[:alpha:]\n[[:nope:]]\n[[:]x]\n",
    "?.txt\n",  # `?` is one byte: not `é`
    "\\[*\n",
    "**/**/deep\n",
    "x/**/**/y\n",
    "*.log\r\n!keep.log\r\n",
    "tab\t\n",  # a trailing tab is kept
    "foo//\n//foo\n",
    "!\n/\n",
    "[!]\n[]\n",
    "d/**/\n",
    "a\x0cb\nA\x0cB\n",  # a form feed does not end a line
    "\ufeffbom\n",  # a byte order mark is skipped
    "*a*a*a*a*a*a*a*a*a*a*a*a*b\n**/**/**/**/x/**/**/y\n",
]


@needs_git
@pytest.mark.parametrize("gitignore", WILDMATCH_GITIGNORES)
def test_wildmatch_details_agree_with_git(tmp_path: Path, gitignore: str) -> None:
    git_repo(tmp_path, WILDMATCH_FILES, WILDMATCH_DIRS)
    (tmp_path / ".gitignore").write_text(gitignore)
    assert not differences_from_git(tmp_path), gitignore


RANDOM_PIECES = [
    "a", "b", "/", "*", "**", "?", "[", "]", "!", "-", "\\", ":", " ", "[:alpha:]", "^",
    "é", "A", "1",
]  # fmt: skip
RANDOM_NAMES = ["a", "b", "ab", "ba", "aab", "a b", "[a]", "*", "?", "-", "]", "!a", "#a", "é", "A"]


@needs_git
@pytest.mark.parametrize("seed", range(3))
def test_random_gitignores_agree_with_git(tmp_path: Path, seed: int) -> None:
    chooser = random.Random(seed)
    paths = {
        "/".join(chooser.choice(RANDOM_NAMES) for _ in range(chooser.randint(1, 3)))
        for _ in range(40)
    }
    directories = {path.rpartition("/")[0] for path in paths} - {""}
    directories |= {parent.rpartition("/")[0] for parent in directories} - {""}
    git_repo(tmp_path, sorted(paths - directories), sorted(directories))
    for _ in range(40):
        lines = [
            "".join(chooser.choice(RANDOM_PIECES) for _ in range(chooser.randint(1, 8)))
            for _ in range(chooser.randint(1, 3))
        ]
        (tmp_path / ".gitignore").write_text("\n".join(lines) + "\n")
        assert not differences_from_git(tmp_path), lines


HOSTILE_PATTERNS = [
    ("*a*a*a*a*a*a*a*a*a*a*a*a*b", "a" * 60),
    ("**/" * 40 + "*a*a*a*a*a*a*a*a*b", "/".join(["a" * 30] * 8)),
    ("a/**/" * 30 + "b", "a/" * 120 + "c"),
    ("[a-z]*" * 50 + "b", "a" * 250),
    ("*" + "[!b]*" * 40 + "b", "a" * 250),
    ("*" + "?*" * 60 + "b", "a" * 250),
    ("[[:alpha:]]" * 200, "a" * 199 + "1"),
]


@pytest.mark.parametrize(("pattern", "path"), HOSTILE_PATTERNS)
def test_hostile_patterns_are_matched_without_backtracking(pattern: str, path: str) -> None:
    rules = compile_ignore_lines([pattern, f"/{pattern}"])  # by name and by whole path
    started = time.perf_counter()
    verdicts = [
        rules_verdict(rules, name, is_dir)
        for name in (path, f"x/{path}")
        for is_dir in (False, True)
    ]
    assert time.perf_counter() - started < 0.5
    assert verdicts == [None] * 4
