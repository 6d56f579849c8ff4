"""Code that runs a synced entry file inside a code context, the way each language's
users expect (`python main.py`, `perl main.pl`, …), re-reading changed helper modules."""

from __future__ import annotations

import dataclasses
import json
from pathlib import PurePosixPath
from typing import Final

from workbench.protocol.types import ExecutionResult

__all__ = [
    "LANGUAGE_BY_EXTENSION",
    "entry_language_problem",
    "entry_result",
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
    forgotten before each run, so edited helpers are re-read.
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
            "    try:\n"
            "        runpy.run_path(entry, run_name='__main__')\n"
            "    except SystemExit as exit:\n"
            "        if exit.code not in (0, None):\n"
            "            raise\n"
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
