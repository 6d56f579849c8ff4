"""Dynamic `import()` of JavaScript modules from `/workspace` (spec 7.8): `.js`, `.mjs` and
`.json`, relative to the context's cwd (a module's own imports to its directory), each run
once and kept for the context, also across a restore from its snapshot; on every backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.api import Backend, SandboxClient
from workbench.backends.local import open_local_backend
from workbench.sync.runner import entry_runner_code

pytestmark = pytest.mark.usefixtures("javascript_engine")

FILES = {
    "/workspace/lib.mjs": (
        "import { shout } from './lib/util.js';\n"
        "import settings from './lib/settings.json';\n"
        "export const state = { evaluated: 0 };\n"
        "state.evaluated++;\n"
        "export function greet(name) { return shout(`hello ${name}`); }\n"
        "export default settings.name;\n"
        "export const later = () => import('./lib/util.js').then((m) => m.shout('later'));\n"
    ),
    "/workspace/lib/util.js": "export const shout = (text) => text.toUpperCase() + '!';\n",
    "/workspace/lib/settings.json": '{"name": "workbench"}',
    "/workspace/sub/here.mjs": "export const where = 'sub';\n",
    "/workspace/broken.mjs": "export const = 1;\n",
    "/workspace/redeclares.mjs": "let x = 1;\nlet x = 2;\n",
    "/workspace/bad.json": "{not json",
    "/workspace/throws.mjs": (
        "globalThis.evaluations = (globalThis.evaluations ?? 0) + 1;\n"
        "throw new RangeError('module failed');\n"
    ),
    "/workspace/frames.mjs": (
        "// a comment\nexport function fail() {\n  throw new Error('deep');\n}\n"
    ),
    "/workspace/odd.mjs": (
        "#!/usr/bin/env node\n"
        "const module = { name: 'm' };\n"
        "export const b = 2, a = 1;\n"
        "export let c = 0 /* one, two */, d = [1, 2];\n"
        "export default module.name;\n"
    ),
    "/workspace/notes.txt": "not code",
}


async def write_files(sandbox: SandboxClient) -> None:
    for directory in ("/workspace/lib", "/workspace/sub"):
        await sandbox.mkdir(directory)
    for path, text in FILES.items():
        await sandbox.write_file(path, text)


USE = (
    "const lib = await import('./lib.mjs');\n"
    "[lib.default, lib.greet('you'), lib.state.evaluated, await lib.later(),"
    " Object.prototype.toString.call(lib), Object.keys(lib).sort().join()]"
)
EXPECTED = [
    "workbench",
    "HELLO YOU!",
    1,
    "LATER!",
    "[object Module]",
    "default,greet,later,state",
]


async def test_a_context_imports_workspace_modules_once(sandbox: SandboxClient) -> None:
    await write_files(sandbox)
    context = await sandbox.interpreter.create_code_context("JAVASCRIPT")
    for _ in range(2):  # the second run gets the same module: evaluated once
        result = await sandbox.interpreter.run_code(USE, context=context)
        assert result.error is None, result.error
        assert result.results[-1].json == EXPECTED
    absolute = await sandbox.interpreter.run_code(
        "(await import('/workspace/lib.mjs')).state.evaluated", context=context
    )
    assert absolute.error is None and absolute.results[-1].text == "1"
    moved = await sandbox.interpreter.run_code(
        "process.chdir('sub'); (await import('./here.mjs')).where", context=context
    )
    assert moved.error is None, moved.error
    assert moved.results[-1].text == "'sub'"


@pytest.mark.parametrize(
    ("specifier", "error", "message"),
    [
        ("./missing.mjs", "TypeError", 'Error loading module "./missing.mjs" (resolved path'),
        ("../../etc/passwd.js", "TypeError", "only paths in /workspace can be imported"),
        ("lodash", "TypeError", "only paths in /workspace can be imported"),
        ("./notes.txt", "TypeError", "only .js, .mjs and .json files can be imported"),
        ("./broken.mjs", "SyntaxError", "(/workspace/broken.mjs:1)"),
        ("./redeclares.mjs", "SyntaxError", "(/workspace/redeclares.mjs:2)"),
        ("./bad.json", "SyntaxError", "(/workspace/bad.json)"),
        ("./throws.mjs", "RangeError", "module failed"),
    ],
)
async def test_an_import_that_cannot_load_rejects_with_a_clear_error(
    sandbox: SandboxClient, specifier: str, error: str, message: str
) -> None:
    await write_files(sandbox)
    context = await sandbox.interpreter.create_code_context("JAVASCRIPT")
    code = f"let caught;\ntry {{ await import({specifier!r}) }} catch (e) {{ caught = e }}\n"
    code += "[caught.name, caught.message]"
    result = await sandbox.interpreter.run_code(code, context=context)
    assert result.error is None, result.error
    name, text = result.results[-1].json
    assert name == error and message in text, text
    unhandled = await sandbox.interpreter.run_code(f"await import({specifier!r})", context=context)
    assert unhandled.error is not None and unhandled.error.name == error
    assert message in unhandled.error.message
    # Pointed at the user's import or the module's line, never at a module's line taken
    # for the user's.
    for frame in unhandled.error.traceback:
        assert frame == "@<sandbox>:1:7" or "@/workspace/" in frame, unhandled.error.traceback
    if specifier == "./throws.mjs":
        assert "@/workspace/throws.mjs:2" in unhandled.error.traceback
    # A module that threw stays failed, like an ES module: it does not run again.
    evaluations = await sandbox.interpreter.run_code(
        "String(globalThis.evaluations)", context=context
    )
    expected = "'1'" if specifier == "./throws.mjs" else "'undefined'"
    assert evaluations.results[-1].text == expected


async def test_modules_are_es_modules_in_what_a_user_sees(sandbox: SandboxClient) -> None:
    """One namespace per module with sorted keys, a hashbang and a `module` binding are
    fine, a module's frames name its path and line, and a user's own binding of the
    importer's name changes nothing."""
    await write_files(sandbox)
    context = await sandbox.interpreter.create_code_context("JAVASCRIPT")
    code = (
        "let \u0131mport = 5, $mport = 6;\n"
        "const odd = await import('./odd.mjs');\n"
        "[odd === await import('./odd.mjs'), Object.keys(odd).join(), odd.default, $mport]"
    )
    result = await sandbox.interpreter.run_code(code, context=context)
    assert result.error is None, result.error
    assert result.results[-1].json == [True, "a,b,c,d,default", "m", 6]
    failed = await sandbox.interpreter.run_code(
        "const frames = await import('./frames.mjs');\nframes.fail()", context=context
    )
    assert failed.error is not None and failed.error.message == "deep"
    assert failed.error.traceback == ["fail@/workspace/frames.mjs:3", "@<sandbox>:2:8"]


async def test_a_stateless_run_has_no_workspace_to_import_from(backend: Backend) -> None:
    result = await backend.run_code("await import('./lib.mjs')", binding="JAVASCRIPT")
    assert result.error is not None and result.error.name == "TypeError"
    assert "a stateless run has no /workspace" in result.error.message


async def test_an_import_in_a_string_or_comment_is_left_alone(sandbox: SandboxClient) -> None:
    context = await sandbox.interpreter.create_code_context("JAVASCRIPT")
    code = '// import("x")\nconst text = "import(x)"; /* import(y) */ text'
    result = await sandbox.interpreter.run_code(code, context=context)
    assert result.error is None, result.error
    assert result.results[-1].text == "'import(x)'"


async def test_imported_modules_survive_a_restore_from_the_snapshot(tmp_path: Path) -> None:
    data = tmp_path / "data"
    backend = open_local_backend(data, embedded=True)
    try:
        sandbox = backend.sandbox("imports")
        await write_files(sandbox)
        context = await sandbox.interpreter.create_code_context("JAVASCRIPT")
        first = await sandbox.interpreter.run_code(USE, context=context)
        assert first.error is None, first.error
    finally:
        await backend.aclose()
    backend = open_local_backend(data, embedded=True)
    try:
        sandbox = backend.sandbox("imports")
        again = await sandbox.interpreter.run_code(USE, context=context)
        assert again.error is None, again.error
        assert again.session is not None and again.session.boot != "fresh"
        assert again.results[-1].json == EXPECTED  # the module kept, not evaluated again
        fresh = await sandbox.interpreter.run_code(
            "(await import('./sub/here.mjs')).where", context=context
        )
        assert fresh.error is None and fresh.results[-1].text == "'sub'"
    finally:
        await backend.aclose()


async def test_a_module_path_cannot_end_its_source_comment(sandbox: SandboxClient) -> None:
    """The path names the module in stack traces (`//# sourceURL=`); a line separator in it
    would end that comment and run the rest of the name as code."""
    await sandbox.write_file("/workspace/a\u2028throw 1.mjs", "export const ok = 1;\n")
    context = await sandbox.interpreter.create_code_context("JAVASCRIPT")
    code = "(await import('./a\\u2028throw 1.mjs')).ok"
    result = await sandbox.interpreter.run_code(code, context=context)
    assert result.error is None, result.error
    assert result.results[-1].text == "1"


async def test_watch_and_run_of_an_mjs_entry_reads_edited_helpers(sandbox: SandboxClient) -> None:
    """`watch --run main.mjs` runs the entry as an ES module each time, its helpers (under
    the synced root) read again after an edit."""
    await sandbox.mkdir("/workspace/project")
    await sandbox.write_file(
        "/workspace/project/main.mjs",
        "import { text } from './helper.mjs';\nconsole.log(text());\n",
    )
    await sandbox.write_file("/workspace/project/helper.mjs", "export const text = () => 'v1';\n")
    context = await sandbox.interpreter.create_code_context("JAVASCRIPT")
    runner = entry_runner_code("javascript", "/workspace/project/main.mjs", "/workspace/project")
    first = await sandbox.interpreter.run_code(runner, context=context)
    assert first.error is None, first.error
    assert first.stdout == ["v1"]
    await sandbox.write_file("/workspace/project/helper.mjs", "export const text = () => 'v2';\n")
    second = await sandbox.interpreter.run_code(runner, context=context)
    assert second.error is None, second.error
    assert second.stdout == ["v2"] and second.results == []
