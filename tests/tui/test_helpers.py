"""The TUI's pure helpers: env-var text, formatting, local history, transcript export."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from workbench.api import (
    CodeContext,
    ExecutionError,
    ExecutionResult,
    ResultEntry,
    SandboxError,
    Usage,
)
from workbench.api.display import human_bytes
from workbench.config import ConfigError
from workbench.profiles import UnknownProfileError
from workbench.protocol.errors import error_response
from workbench.transcripts.documents import (
    error_header,
    error_traceback,
    transcript_json,
    transcript_markdown,
)
from workbench.tui.env_vars_text import env_vars_update, parse_env_vars_text
from workbench.tui.error_messages import describe_error
from workbench.tui.formatting import countdown, execution_footer
from workbench.tui.history_store import ExpandedTree, LocalHistoryStore, OpenTabs
from workbench.tui.transcript_cell import TranscriptCell
from workbench.tui.transcript_export import write_transcript


def test_env_vars_text_checks_each_key() -> None:
    parsed = parse_env_vars_text("# comment\nA=1\n\n_B = two=2\n1BAD=x\nnoequals\nA=3")
    assert parsed.values == {"A": "1", "_B": " two=2"}
    assert parsed.problems == [
        "line 5: key '1BAD' must match ^[A-Za-z_][A-Za-z0-9_]*$",
        "line 6: expected KEY=VALUE",
        "line 7: A is set twice",
    ]
    # Past what a request may carry: said as it is typed, not refused on save (QA).
    many = parse_env_vars_text("\n".join(f"KEY_{n}=value {n}" for n in range(5000)))
    assert many.problems == [
        "the variables take 115.0 KiB as sent; a request takes at most 96.0 KiB"
    ]
    assert parse_env_vars_text("\n".join(f"KEY_{n}=value {n}" for n in range(4000))).valid
    assert env_vars_update({"A": "1", "GONE": "x"}, {"A": "2", "NEW": "y"}) == {
        "GONE": None,
        "A": "2",
        "NEW": "y",
    }


def test_formatting() -> None:
    assert human_bytes(512) == "512 B" and human_bytes(1536) == "1.5 KiB"
    assert countdown(0) == "expired"
    assert countdown(90_061_000) == "1d 01:01:01"
    result = ExecutionResult(
        "1", "perl", "e", 2.0, usage=Usage(733_645, 10_000_000, 32 << 20), execution_count=2
    )
    assert execution_footer(result, show_measurements=True) == (
        "2.0 ms · fuel 733.6k/10.0M · memory 32.0 MiB · [2]"
    )
    assert execution_footer(result, show_measurements=False) == (
        "fuel …/10.0M · memory 32.0 MiB · [2]"
    )
    # component engines cannot measure their memory (0): the footer leaves it out
    unmeasured = ExecutionResult("1", "python", "e", 2.0, usage=Usage(1, 2, 0), execution_count=1)
    assert execution_footer(unmeasured, show_measurements=False) == "fuel …/2 · [1]"


def test_local_history_store_keeps_entries_per_context(tmp_path: Path) -> None:
    store = LocalHistoryStore(tmp_path / "history.json")
    store.append("staging", "box", "ctx-1", "1+1")
    store.append("staging", "box", "ctx-1", "2+2")
    store.append("staging", "box", "ctx-2", "other")
    again = LocalHistoryStore(tmp_path / "history.json")
    assert again.entries("staging", "box", "ctx-1") == ["1+1", "2+2"]
    assert again.entries("local", "box", "ctx-1") == []
    (tmp_path / "history.json").write_text("not json")
    assert again.entries("staging", "box", "ctx-1") == []
    # Nested past what Python's parser recurses through: as damaged, not a crash.
    (tmp_path / "history.json").write_text("[" * 100_000 + "]" * 100_000)
    assert again.entries("staging", "box", "ctx-1") == []


def test_the_expanded_tree_is_kept_per_profile_and_damage_reads_as_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tree.json"
    tree = ExpandedTree(path)
    tree.keep("local", {"demo": ["/workspace", "/workspace/sub"], "other": []})
    tree.keep("staging", {"box": ["/workspace"]})
    assert ExpandedTree(path).expanded("local") == {
        "demo": ["/workspace", "/workspace/sub"],
        "other": [],
    }
    assert tree.expanded("nowhere") == {}
    path.write_text(json.dumps({"local": {"demo": ["/workspace", 7, None], "bad": "x"}}))
    assert tree.expanded("local") == {"demo": ["/workspace"]}
    path.write_text(json.dumps({"local": ["not", "a", "map"]}))
    assert tree.expanded("local") == {}
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert tree.expanded("local") == {}


def test_transcript_exports() -> None:
    result = ExecutionResult(
        "{a => 1}",
        "perl",
        "e",
        1.0,
        stdout=["out"],
        results=[ResultEntry(json={"a": 1}, is_json=True)],
    )
    cells = [
        TranscriptCell(1, "{a => 1}", "perl", result),
        TranscriptCell(2, "x", "perl", None, "lost"),
    ]
    markdown = transcript_markdown("demo", cells)
    assert "```perl\n{a => 1}\n```" in markdown and '"a": 1' in markdown and "lost" in markdown
    exported = json.loads(transcript_json("demo", cells))
    assert exported["cells"][1] == {
        "number": 2,
        "language": "perl",
        "code": "x",
        "result": None,
        "failure": "lost",
    }


def test_markdown_export_shows_an_error_once_and_keeps_raw_json() -> None:
    error = ExecutionError("SystemExit", "config missing", ["(sandbox):1:in '<main>'"])
    result = ExecutionResult(
        "abort", "ruby", "e", 1.0, stderr=["loading", "config missing"], error=error
    )
    cells = [TranscriptCell(1, "abort 'config ' + 'missing'", "ruby", result)]
    markdown = transcript_markdown("demo", cells)
    assert markdown.count("config missing") == 1 and "loading" in markdown
    exported = json.loads(transcript_json("demo", cells))
    assert exported["cells"][0]["result"]["logs"]["stderr"] == ["loading", "config missing"]


def test_an_error_without_a_message_is_its_name_once() -> None:
    """Python writes `MemoryError` (no colon) for an exception with an empty message, as
    the first line of its traceback: the header is that line, and it is not repeated."""
    error = ExecutionError("MemoryError", "", ["MemoryError", '  File "<sandbox>", line 1'])
    result = ExecutionResult("x = bytearray(10**10)", "python", "e", 1.0, error=error)
    assert error_header(error) == ["MemoryError"]
    assert error_traceback(error) == ['  File "<sandbox>", line 1']
    markdown = transcript_markdown("demo", [TranscriptCell(1, result.code, "python", result)])
    assert markdown.count("MemoryError") == 1 and "MemoryError:" not in markdown


def test_an_export_never_writes_through_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("not ours")
    link = tmp_path / "exports" / "t.md"
    link.parent.mkdir()
    link.symlink_to(target)
    cells = [TranscriptCell(1, "1", "perl", None, "lost")]
    with pytest.raises(FileExistsError):
        write_transcript(link, "demo", cells, "markdown", overwrite=False)
    with pytest.raises(OSError):
        write_transcript(link, "demo", cells, "markdown", overwrite=True)
    assert target.read_text() == "not ours"


def test_markdown_export_keeps_guest_fences_inside_its_own() -> None:
    """Output or code holding a fence cannot close the export's: what follows stays text,
    never a heading, an image or HTML (parsed with CommonMark, as a viewer would)."""
    from markdown_it import MarkdownIt

    hostile = ["```", "# PWNED", "![x](http://evil.example/x.png)", "<img src=x>", "`````"]
    result = ExecutionResult("print()", "python", "e", 1.0, stdout=hostile)
    cells = [TranscriptCell(1, "s = '````'\n# not a heading", "python", result)]
    tokens = MarkdownIt().parse(transcript_markdown("demo", cells))
    headings = [
        tokens[index + 1].content
        for index, token in enumerate(tokens)
        if token.type == "heading_open"
    ]
    assert headings == ["demo", "In [1]"]
    assert not [token for token in tokens if token.type in ("html_block", "image")]
    fences = [token for token in tokens if token.type == "fence"]
    assert [fence.content.splitlines() for fence in fences] == [
        ["s = '````'", "# not a heading"],
        hostile,
    ]


def test_a_typed_name_stays_one_segment_under_its_directory() -> None:
    from workbench.tui.workspace_paths import child_path, moved_path, name_problem

    assert name_problem("report.py") is None and name_problem("ünï cödé") is None
    assert name_problem("") == "type a name"
    assert name_problem("   ") == "a name, not only spaces"  # a blank entry in the tree
    assert name_problem("a/b") == "a name, not a path: no /"
    assert name_problem("..") is not None and name_problem(".") is not None
    assert name_problem("evil\x1b[2J") == "no control characters"
    assert name_problem("tab\there") == "no control characters"
    assert name_problem("\ud800") == "not valid text"
    assert name_problem("é" * 128) == "at most 255 bytes (this one has 256)"
    assert child_path("/workspace/src", "main.py") == "/workspace/src/main.py"
    assert child_path("/workspace", "x") == "/workspace/x"
    with pytest.raises(ValueError):
        child_path("/workspace", "../etc")
    with pytest.raises(ValueError):
        child_path("/etc", "passwd")
    assert moved_path("/workspace/a/b.py", "/workspace/a", "/workspace/c") == "/workspace/c/b.py"
    assert moved_path("/workspace/ab.py", "/workspace/a", "/workspace/c") == "/workspace/ab.py"


def test_a_profile_that_cannot_be_used_is_described_in_its_own_words() -> None:
    """A missing token read "UnknownProfileError: profile 'dev' reads its token…": the
    profile is known, only its token is missing (found by QA)."""
    problem = "profile 'dev' reads its token from $QA_TOKEN, which is not set"
    for error in (UnknownProfileError(problem), ConfigError(problem)):
        assert describe_error(error) == problem
    assert describe_error(ValueError("odd")) == "ValueError: odd"


def test_a_gateway_that_did_not_answer_is_described_with_no_status() -> None:
    """QA: a refused connection read "(CONNECTION_FAILED, HTTP 503)", though no answer
    came; an answer keeps its code and status."""
    refused = "connection refused by http://127.0.0.1:9: is the gateway running?"
    failed = SandboxError(error_response("CONNECTION_FAILED", refused, http_status=503))
    assert describe_error(failed) == refused
    answered = SandboxError(error_response("INTERNAL_ERROR", "boom", http_status=500))
    assert describe_error(answered) == "boom (INTERNAL_ERROR, HTTP 500)"


def test_keeping_drafts_leaves_those_of_tabs_not_reopened_yet(tmp_path: Path) -> None:
    """A quit before every tab had reopened kept the reopened tabs' drafts and dropped the
    others' (a reopened tab takes its draft out of the file; the others' were still
    there): `keep_drafts` touches only the tabs it is given."""
    tabs = OpenTabs(tmp_path / "tabs.json")
    first, second, third = (
        CodeContext(context_id, "PERL", "perl", "/workspace", "", "")
        for context_id in ("c1", "c2", "c3")
    )
    for context in (first, second, third):
        tabs.opened("local", "demo", context)
    tabs.keep_drafts("local", {"c1": "my $a = 1;", "c2": "my $b = 2;", "c3": "my $c = 3;"})
    assert tabs.take_draft("local", "c1") == "my $a = 1;"  # the first tab reopened
    tabs.keep_drafts("local", {"c1": "my $a = 10;"})  # quit before the others reopened
    assert [tabs.take_draft("local", context_id) for context_id in ("c1", "c2", "c3")] == [
        "my $a = 10;",
        "my $b = 2;",
        "my $c = 3;",
    ]
    assert tabs.take_draft("local", "c2") == ""  # taken: a later reopening brings nothing
    tabs.keep_drafts("local", {"c3": ""})  # cleared in its tab
    assert tabs.take_draft("local", "c3") == ""
    assert [context.id for _, context in tabs.tabs("local")] == ["c1", "c2", "c3"]


def test_a_replayable_transcript_starts_where_the_context_was_created() -> None:
    """The workbench's replayable export and its rerun on another profile replayed from
    the cwd of the last run (a tab opened from the tree; found in review)."""
    from workbench.api import ContextInfo
    from workbench.tui.transcript_export import replayable_transcript
    from workbench.tui.tree_nodes import context_from_info

    info = ContextInfo("c1", "PERL", "perl", "e", "/workspace/sub", "a", "b", 2, None, "/workspace")
    context = context_from_info(info)
    assert replayable_transcript(context, []).context.cwd == "/workspace"
    assert set(context.to_json()) == {"id", "binding", "language", "cwd", "createdAt",
                                      "lastUsed", "startCwd"}  # fmt: skip
    created = replace(context, start_cwd=None)  # as a context made here comes back
    assert replayable_transcript(created, []).context.cwd == "/workspace/sub"
    assert "startCwd" not in created.to_json()
