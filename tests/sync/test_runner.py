"""A watch's run of an entry file is recognised from its code in a history: exactly the
code `entry_runner_code` makes, for any entry and root, and nothing else."""

from __future__ import annotations

import time

import pytest

from workbench.sync.runner import EntryRun, entry_run_of, entry_runner_code

LANGUAGES = ["python", "javascript", "perl", "ruby"]
ENTRIES = {
    "python": "main.py",
    "javascript": "main.js",
    "perl": "main.pl",
    "ruby": "main.rb",
}
AWKWARD_ROOTS = ["/workspace", '/workspace/it\'s a \\ "dir"', "/workspace/ünï ✓"]


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("root", AWKWARD_ROOTS)
def test_a_runner_is_recognised_with_its_entry_and_root(language: str, root: str) -> None:
    entry = f"{root}/sub dir/{ENTRIES[language]}"
    run = entry_run_of(language, entry_runner_code(language, entry, root))
    # A JavaScript entry runs as a classic script, whose code does not name the root.
    expected_root = None if language == "javascript" else root
    assert run == EntryRun(entry, expected_root)
    assert run.shown_entry == (f"sub dir/{ENTRIES[language]}" if expected_root else entry)


def test_an_es_module_entry_is_recognised_with_its_root() -> None:
    code = entry_runner_code("javascript", "/workspace/app/main.mjs", "/workspace/app")
    assert entry_run_of("javascript", code) == EntryRun("/workspace/app/main.mjs", "/workspace/app")


@pytest.mark.parametrize("language", LANGUAGES)
def test_other_code_is_not_a_runner(language: str) -> None:
    code = entry_runner_code(language, f"/workspace/{ENTRIES[language]}", "/workspace")
    assert entry_run_of(language, code + "1\n") is None  # something added after it
    assert entry_run_of(language, "x = 1\n" + code) is None  # or before it
    assert entry_run_of(language, code.replace("\n", "\n ", 1)) is None  # or changed within
    assert entry_run_of(language, "print(1)") is None
    assert entry_run_of(language, "") is None
    for other in LANGUAGES:
        if other != language:
            assert entry_run_of(other, code) is None


def test_a_hostile_look_alike_is_no_runner_and_never_raises() -> None:
    """Another client's history is untrusted: arguments are read as literals only (a call
    in them is no runner), and deep nesting, unhashable literals, broken strings and
    quadratic traps are refused quickly, not raised or parsed for seconds."""
    head = entry_runner_code("python", "/workspace/main.py", "/workspace").partition(
        "\n__workbench_run("
    )[0]
    python_arguments = [
        "__import__('os').getcwd(), 'a', 'b'",
        "(" * 100_000 + ")" * 100_000,
        "{[]: 1}, 'a', 'b'",
        "{[1]}, 'a', 'b'",
    ]
    looks = [
        ("python", f"{head}\n__workbench_run({arguments})\ndel __workbench_run\n")
        for arguments in python_arguments
    ]
    looks += [
        ("javascript", "(0, eval)(fs.readFileSync(" + "[" * 60_000),
        ("javascript", '// (0, eval)(fs.readFileSync("\\ud800'),
        ("javascript", "if (typeof \\u0131mport \\u0131mport.forget(" + "{" * 60_000),
        ("ruby", "__wb_root = " + "[" * 60_000),
        ("perl", "{\n  my ($entry, $dir, $root) = ('" + "\\'" * 32_000 + "\n'"),
        (
            "perl",
            "{\n  my ($entry, $dir, $root) = ('a', '" + "\\'" * 16_000 + "', 'b" + "x" * 16_000,
        ),
        ("python", head + " " * 70_000),
    ]
    for language, code in looks:
        started = time.perf_counter()
        assert entry_run_of(language, code) is None, code[:80]
        assert time.perf_counter() - started < 0.5, code[:80]


def test_paths_with_newlines_or_an_empty_root_are_recognised() -> None:
    for language in LANGUAGES:
        entry = f"/workspace/a\nb/{ENTRIES[language]}"
        run = entry_run_of(language, entry_runner_code(language, entry, "/workspace/a\nb"))
        assert run is not None and run.entry == entry
    assert entry_run_of("python", entry_runner_code("python", "/main.py", "")) == EntryRun(
        "/main.py", ""
    )
