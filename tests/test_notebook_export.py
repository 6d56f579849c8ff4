"""`transcript export --format ipynb|md|json`: a context's cells as documents, through the
console script on the local backend (all four languages) and on `serve`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.cli import cli_env, one_error_line, run_cli
from tests.cli.test_diff import open_profile, profiles_env
from workbench.api import ExecutionError, ExecutionResult, ResultEntry
from workbench.transcripts.documents import (
    DocumentCell,
    transcript_json,
    transcript_markdown,
    transcript_notebook,
)

pytestmark = pytest.mark.slow

CELLS = {
    "PYTHON": (
        "import sys\nprint('out')\nprint('err', file=sys.stderr)\n{'a': [1, 2]}",
        "1 / 0",
        "python",
    ),
    "JAVASCRIPT": (
        "console.log('out'); console.error('err'); ({a: [1, 2]})",
        "null.x",
        "javascript",
    ),
    "PERL": ('print "out\\n"; warn "err\\n"; 42', 'die "boom\\n"', "perl"),
    "RUBY": ('puts "out"; $stderr.puts "err"; 42', 'raise "boom"', "ruby"),
}


def read_notebook(path: Path) -> Any:
    """The notebook at `path`, checked against the nbformat 4 schema."""
    notebook = nbformat.read(str(path), as_version=4)
    nbformat.validate(notebook)
    return notebook


def outputs_by_type(cell: Any) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for output in cell.outputs:
        found.setdefault(output.output_type, []).append(output)
    return found


def test_a_four_language_sandbox_exports_valid_notebooks(tmp_path: Path, all_engines: None) -> None:
    env = cli_env(tmp_path, SANDBOX_WORKBENCH_RUBY_CONTEXTS="1")  # Ruby's are an extension
    for binding, (first, failing, language) in CELLS.items():
        ran = run_cli(env, "run", "-s", "four", "-b", binding, "--json", "-c", first)
        assert ran.returncode == 0, ran.stderr
        context_id = json.loads(ran.stdout)["context"]["id"]
        failed = run_cli(env, "run", "-s", "four", "--context", context_id, "-c", failing)
        assert failed.returncode == 1, failed.stderr

        path = tmp_path / f"{language}.ipynb"
        args = ("transcript", "export", "-s", "four", "--context", context_id[:8])
        exported = run_cli(env, *args, "-o", str(path))
        assert exported.returncode == 0, exported.stderr
        notebook = read_notebook(path)
        assert notebook.metadata.kernelspec.language == language
        assert notebook.metadata.language_info.name == language
        assert notebook.metadata.sandbox_workbench["context"] == context_id
        code_cell, error_cell = notebook.cells
        assert (code_cell.source, error_cell.source) == (first, failing)
        assert (code_cell.execution_count, error_cell.execution_count) == (1, 2)
        outputs = outputs_by_type(code_cell)
        streams = {output.name: output.text for output in outputs["stream"]}
        assert streams["stdout"] == "out\n", binding
        assert "err" in streams["stderr"], binding
        (result,) = outputs["execute_result"]
        assert result.execution_count == 1
        if language in ("python", "javascript"):
            assert result.data["application/json"] == {"a": [1, 2]}
        else:
            assert result.data["text/plain"] == "42"
        assert "error" not in outputs
        (error,) = outputs_by_type(error_cell)["error"]
        assert error.ename and error.evalue, binding
        assert os_mode(path) == 0o600

    # The same cells as Markdown (from the extension) and as JSON (asked for).
    perl = json.loads(run_cli(env, "run", "-s", "four", "-b", "PERL", "--json", "-c", "1").stdout)
    perl_id = perl["context"]["id"]
    args = ("transcript", "export", "-s", "four", "--context", perl_id)
    markdown = run_cli(env, *args, "-o", str(tmp_path / "perl.md"))
    assert markdown.returncode == 0, markdown.stderr
    text = (tmp_path / "perl.md").read_text()
    assert '```perl\nprint "out\\n"' in text and "**error**" in text
    as_json = run_cli(env, *args, "--format", "json", "-o", "-")
    assert as_json.returncode == 0, as_json.stderr
    cells = json.loads(as_json.stdout)["cells"]
    assert [cell["code"] for cell in cells] == [CELLS["PERL"][0], CELLS["PERL"][1], "1"]
    assert cells[1]["result"]["error"]["message"].startswith("boom")
    refused = run_cli(env, *args, "-o", str(tmp_path / "x.ipynb"), "--with-files")
    assert refused.returncode == 2
    assert one_error_line(refused) == "error: --with-files: only with --format transcript"


def os_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.usefixtures("perl_engine")
async def test_a_notebook_from_serve(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    env = profiles_env(request, tmp_path, workerd=False)
    async with open_profile(request, tmp_path, "served") as backend:
        sandbox = backend.sandbox("notebook-served")
        context = await sandbox.interpreter.create_code_context("PERL")
        for code in CELLS["PERL"][:2]:
            await sandbox.interpreter.run_code(code, context=context)
    try:
        path = tmp_path / "served.ipynb"
        args = ("transcript", "export", "-s", "notebook-served", "--context", context.id)
        exported = run_cli(env, *args, "-p", "served", "-o", str(path))
        assert exported.returncode == 0, exported.stderr
        notebook = read_notebook(path)
        assert notebook.metadata.kernelspec.language == "perl"
        assert notebook.metadata.sandbox_workbench["profile"] == "served"
        assert [cell.source for cell in notebook.cells] == list(CELLS["PERL"][:2])
        assert outputs_by_type(notebook.cells[1])["error"][0].evalue.startswith("boom")
    finally:
        async with open_profile(request, tmp_path, "served") as backend:
            await backend.sandbox("notebook-served").destroy()


def test_guest_text_is_never_markup_in_a_notebook() -> None:
    """Output that looks like HTML or a notebook's own JSON stays text: streams, plain
    text and JSON data, never a mimetype a viewer renders or runs."""
    hostile = '<script>alert(1)</script>", "output_type": "display_data'
    result = ExecutionResult(
        "x",
        "python",
        "e",
        1.0,
        stdout=[hostile, "\x1b[31mred\x1b[0m"],
        stderr=["<img src=x onerror=alert(1)>"],
        results=[
            ResultEntry(text=hostile),
            ResultEntry(json={"text/html": "<b>x</b>"}, is_json=True),
        ],
        error=ExecutionError("<b>Name</b>", hostile, ["<i>frame</i>"]),
    )
    notebook = nbformat.from_dict(
        transcript_notebook("t", "python", [DocumentCell(1, "x", "python", result)])
    )
    nbformat.validate(notebook)
    (cell,) = notebook.cells
    mimetypes = {key for output in cell.outputs for key in output.get("data", {})}
    assert mimetypes == {"text/plain", "application/json"}
    assert [output.output_type for output in cell.outputs] == [
        "stream",
        "stream",
        "execute_result",
        "execute_result",
        "error",
    ]
    assert cell.outputs[0].text == f"{hostile}\n\x1b[31mred\x1b[0m\n"
    assert cell.outputs[3].data["application/json"] == {"text/html": "<b>x</b>"}
    unknown = nbformat.from_dict(transcript_notebook("t", "cobol", []))
    nbformat.validate(unknown)
    assert unknown.metadata.kernelspec.language == "cobol"


def test_guest_escapes_in_a_markdown_export_are_shown_not_sent() -> None:
    """A Markdown document is read on a terminal too (`cat`): a guest's escape sequences
    are written as visible `\\xNN`, newlines and tabs kept; JSON keeps the exact text."""
    result = ExecutionResult(
        "x",
        "python",
        "e",
        1.0,
        stdout=["\x1b[2J\x1b]52;c;eA==\x07cleared", "tab\there"],
        results=[ResultEntry(text="'\\x9b'\x9b")],
    )
    cells = [DocumentCell(1, "print('\x1b[2J')", "python", result)]
    markdown = transcript_markdown("t\x1b[31m", cells)
    assert not any(
        (0x00 <= ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F for c in markdown
    )
    assert "\\x1b[2J\\x1b]52;c;eA==\\x07cleared\ntab\there" in markdown
    assert "# t\\x1b[31m" in markdown and "'\\x9b'\\x9b" in markdown
    exact = json.loads(transcript_json("t", cells))
    assert exact["cells"][0]["result"]["logs"]["stdout"][0] == "\x1b[2J\x1b]52;c;eA==\x07cleared"
