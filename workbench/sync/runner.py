"""Code that runs a synced entry file inside a code context, the way each language's
users expect (`python main.py`, `perl main.pl`, …), re-reading changed helper modules."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import PurePosixPath
from typing import Final

from workbench.protocol.types import ExecutionResult

__all__ = [
    "LANGUAGE_BY_EXTENSION",
    "EntryRun",
    "entry_language_problem",
    "entry_result",
    "entry_run_of",
    "entry_runner_code",
]

LANGUAGE_BY_EXTENSION: Final = {
    ".py": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".pl": "perl",
    ".pm": "perl",
    ".rb": "ruby",
}


def _perl_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def entry_runner_code(language: str, entry: str, root: str) -> str:
    """Source that runs the sandbox file `entry` (absolute) in a `language` context.

    `root` is the synced tree in the sandbox: modules loaded from under it are
    forgotten before each run, so edited helpers are re-read. Python writes no bytecode
    there meanwhile: a `__pycache__` in a synced package is not the sync's to delete, so
    a package renamed in the folder stayed in the sandbox (QA).
    """
    directory = entry.rpartition("/")[0] or "/workspace"
    if language == "python":
        return (
            "def __workbench_run(entry, directory, root):\n"
            "    import runpy, sys\n"
            "    for name, module in list(sys.modules.items()):\n"
            "        origin = getattr(module, '__file__', None) or ''\n"
            "        if origin.startswith(root + '/'):\n"
            "            del sys.modules[name]\n"
            "    if directory not in sys.path:\n"
            "        sys.path.insert(0, directory)\n"
            "    sys.argv = [entry]\n"
            "    writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True\n"
            "    try:\n"
            "        runpy.run_path(entry, run_name='__main__')\n"
            "    except SystemExit as exit:\n"
            "        if exit.code not in (0, None):\n"
            "            raise\n"
            "    finally:\n"
            "        sys.dont_write_bytecode = writes_bytecode\n"
            f"__workbench_run({entry!r}, {directory!r}, {root!r})\n"
            "del __workbench_run\n"
        )
    if language == "javascript":
        classic = f"(0, eval)(fs.readFileSync({json.dumps(entry)}, 'utf8'));\n"
        if entry.endswith(".mjs"):
            # An ES module, like `node main.mjs`, where the engine imports from /workspace
            # itself (ours: `\u0131mport`, engines/javascript/guest/modules.js), after it
            # forgot the modules under `root`, so that edited helpers are read again.
            # Elsewhere a module would be imported once per context: run it as a script.
            return (
                "if (typeof \\u0131mport === 'function') {\n"
                f"  \\u0131mport.forget({json.dumps(root)});\n"
                f"  await import({json.dumps(entry)});\n"
                f"}} else {classic}"
                "undefined;\n"
            )
        # Indirect eval: the file runs as a classic global script, like `node file.js`
        # without modules; `fs` is the workspace-backed global of the engine.
        return f"{classic}undefined;\n"
    if language == "perl":
        return (
            "{\n"
            f"  my ($entry, $dir, $root) = ({_perl_string(entry)}, {_perl_string(directory)}, "
            f"{_perl_string(root)});\n"
            "  delete $INC{$_} for grep { index($INC{$_} // '', \"$root/\") == 0 } keys %INC;\n"
            "  unshift @INC, $dir unless grep { $_ eq $dir } @INC;\n"
            "  local @ARGV = ();\n"
            "  local $0 = $entry;\n"
            "  $! = 0;\n"
            "  my $ok = do $entry;\n"
            "  die $@ if $@;\n"
            '  die "cannot run $entry: $!\\n" if !defined $ok && $!;\n'
            "}\n"
            "undef;\n"
        )
    if language == "ruby":
        return (
            f"__wb_root = {json.dumps(root)}\n"
            "$LOADED_FEATURES.reject! { |f| f.start_with?(__wb_root + '/') }\n"
            f"$LOAD_PATH.unshift({json.dumps(directory)}) unless "
            f"$LOAD_PATH.include?({json.dumps(directory)})\n"
            f"load {json.dumps(entry)}\n"
            "nil\n"
        )
    raise ValueError(f"no entry runner for {language}")


@dataclasses.dataclass(frozen=True)
class EntryRun:
    """A run of a synced entry file, recognised from its code in a context's history."""

    entry: str
    """The entry file's absolute path in the sandbox."""
    root: str | None
    """The synced tree the runner forgot modules under (None where its code does not say:
    a JavaScript entry run as a classic script)."""

    @property
    def shown_entry(self) -> str:
        """The entry as the user named it: relative to the synced tree when known."""
        if self.root is not None and self.entry.startswith(self.root + "/"):
            return self.entry[len(self.root) + 1 :]
        return self.entry


_JSON = json.JSONDecoder()
_PERL_ARGUMENTS = re.compile(
    r"\{\n  my \(\$entry, \$dir, \$root\) = "
    r"\('((?:[^'\\]|\\.)*)', '((?:[^'\\]|\\.)*)', '((?:[^'\\]|\\.)*)'\);\n",
    re.DOTALL,
)
_MAX_RUNNER_CHARS = 64 * 1024
"""Longer code is no runner (its paths are bounded): nothing longer is parsed at all."""


def _json_string_after(code: str, marker: str) -> str | None:
    """The JSON string literal right after the first `marker` in `code` (only a string:
    the decoder recurses into arrays and objects)."""
    at = code.find(marker)
    if at < 0 or not code.startswith('"', at + len(marker)):
        return None
    value, _ = _JSON.raw_decode(code, at + len(marker))
    return value if isinstance(value, str) else None


def _runner_arguments(language: str, code: str) -> tuple[str, str | None] | None:
    """The entry and root that `code` would have been generated from, if it looks like
    a runner of `language` (`entry_run_of` checks that it is one exactly). May raise on
    malformed literals."""
    if language == "python" and code.startswith("def __workbench_run("):
        call = code.rfind("\n__workbench_run(")
        if call < 0 or not code.endswith(")\ndel __workbench_run\n"):
            return None
        arguments = code[call + len("\n__workbench_run(") : -len(")\ndel __workbench_run\n")]
        values = ast.literal_eval(arguments)
        if not (isinstance(values, tuple) and len(values) == 3):
            return None
        entry, _, root = values
        return (entry, root) if isinstance(entry, str) and isinstance(root, str) else None
    if language == "javascript":
        if code.startswith("if (typeof \\u0131mport"):
            root = _json_string_after(code, "\\u0131mport.forget(")
            entry = _json_string_after(code, "await import(")
            return (entry, root) if entry is not None and root is not None else None
        entry = _json_string_after(code, "(0, eval)(fs.readFileSync(")
        return None if entry is None else (entry, None)
    if language == "perl":
        matched = _PERL_ARGUMENTS.match(code)
        if matched is None:
            return None
        entry, _, root = (
            re.sub(r"\\(.)", r"\1", text, flags=re.DOTALL) for text in matched.groups()
        )
        return entry, root
    if language == "ruby" and code.startswith("__wb_root = "):
        root = _json_string_after(code, "__wb_root = ")
        entry = _json_string_after(code, "\nload ")
        return (entry, root) if entry is not None and root is not None else None
    return None


def entry_run_of(language: str, code: str) -> EntryRun | None:
    """The entry run that `code` is, if it is exactly what `entry_runner_code` makes for
    some entry and root (a watch's run, in a history); None for any other code. `code` is
    untrusted (another client's history): this never raises, and reads at most
    `_MAX_RUNNER_CHARS` of it."""
    if len(code) > _MAX_RUNNER_CHARS:
        return None
    try:
        found = _runner_arguments(language, code)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None  # literals that are no runner's (too deep, unhashable, not literals)
    if found is None:
        return None
    entry, root = found
    if entry_runner_code(language, entry, "/workspace" if root is None else root) != code:
        return None
    return EntryRun(entry, root)


def entry_language_problem(entry: str, language: str) -> str | None:
    """Why `entry` is not code of `language`, by its extension (None: it is, or the
    extension says nothing): a Python file run as JavaScript fails in confusing ways."""
    named = LANGUAGE_BY_EXTENSION.get(PurePosixPath(entry).suffix.lower())
    if named is None or not language or named == language:
        return None
    return f"{entry} is a {named} file, and this context runs {language}."


def entry_result(result: ExecutionResult, entry: str) -> ExecutionResult:
    """The run of `entry` (absolute) as its own: a Python traceback starts at the entry
    file, without the frames of the generated runner and of `runpy` before it; an error
    before the entry ran (its SyntaxError, or no such file) has none of theirs (the result
    the backend keeps is unchanged)."""
    error = result.error
    if result.language != "python" or error is None:
        return result
    marker = f'File "{entry}"'
    first = next((index for index, line in enumerate(error.traceback) if marker in line), None)
    if first is None:
        runners = ('File "<sandbox>"', 'File "<frozen runpy>"')
        traceback = [line for line in error.traceback if not line.lstrip().startswith(runners)]
    else:
        header = [line for line in error.traceback[:first] if not line.lstrip().startswith("File ")]
        traceback = header + error.traceback[first:]
    return dataclasses.replace(result, error=dataclasses.replace(error, traceback=traceback))
