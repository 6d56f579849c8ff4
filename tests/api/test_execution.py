"""Executing code in contexts and statelessly (spec 2.2.1, 2.4.1, 3, 6.6, 7.3-7.8, 9, 10)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.api.conftest import fresh_id, raw_call
from tests.conftest import require_engine
from workbench.api import (
    Backend,
    ExecutionResult,
    SandboxClient,
    SandboxError,
    ValidationFailedError,
)

PERL_ENV = 'join ",", map { "$_=$ENV{$_}" } sort keys %ENV'
PYTHON_ENV = 'import os\n",".join(f"{k}={v}" for k, v in sorted(os.environ.items()))'
MiB = 1024 * 1024


def texts(result: ExecutionResult) -> list[str | None]:
    return [entry.text for entry in result.results]


def ok(result: ExecutionResult) -> ExecutionResult:
    assert result.error is None, result.error
    return result


async def raises(call: Any) -> SandboxError:
    with pytest.raises(SandboxError) as caught:
        await call
    return caught.value


# ----- result shape, default context ----------------------------------------------


async def test_result_shape_of_a_context_run(sandbox: SandboxClient, perl_engine: None) -> None:
    context = await sandbox.interpreter.create_code_context("PERL")
    code = 'print "out\\n"; print STDERR "err\\n"; 6 * 7'
    result = ok(await sandbox.interpreter.run_code(code, context=context))
    assert result.code == code
    assert result.language == "perl"
    assert result.engine == (await sandbox.get_info()).contexts[0].engine
    assert (result.stdout, result.stderr) == (["out"], ["err"])
    assert texts(result) == ["42"]
    assert result.usage is not None
    assert 0 < result.usage.fuel_consumed <= result.usage.fuel_limit
    # memoryBytes is the current size of the guest's linear memory
    assert result.usage.memory_bytes > 0
    assert result.usage.memory_bytes % 65536 == 0
    assert result.execution_count == 1
    assert result.context is not None
    assert (result.context.id, result.context.cwd, result.context.executions) == (
        context.id,
        "/workspace",
        1,
    )
    info = await sandbox.get_info()
    assert result.context.expires_at == info.expires_at
    assert info.contexts[0].executions == 1

    wire = result.to_json()
    assert set(wire["context"]) <= {"id", "cwd", "executions", "snapshotMs", "expiresAt"}
    assert "snapshot" not in wire["context"]
    assert "workspace" not in wire

    # a failing run still counts as an execution
    failed = await sandbox.interpreter.run_code('die "boom\\n"', context=context)
    assert failed.error is not None
    assert (failed.error.name, failed.error.message) == ("PerlError", "boom")
    assert failed.execution_count == 2
    assert (await sandbox.get_info()).contexts[0].executions == 2


async def test_default_context_per_binding_is_reused(
    sandbox: SandboxClient, perl_engine: None
) -> None:
    interpreter = sandbox.interpreter
    first = ok(await interpreter.run_code("our $n = 1; $n", binding="PERL"))
    assert first.context is not None
    second = ok(await interpreter.run_code("$n + 1", binding="PERL"))
    assert second.context is not None
    assert second.context.id == first.context.id
    assert (second.execution_count, texts(second)) == (2, ["2"])
    [context] = await interpreter.list_code_contexts()
    assert (context.id, context.binding, context.cwd) == (first.context.id, "PERL", "/workspace")
    # an explicit context created later does not become the default
    await interpreter.create_code_context("PERL", cwd="/workspace/other")
    third = ok(await interpreter.run_code("$n + 2", binding="PERL"))
    assert third.context is not None and third.context.id == first.context.id


async def test_oldest_context_of_the_binding_is_the_default(
    sandbox: SandboxClient, perl_engine: None
) -> None:
    older = await sandbox.interpreter.create_code_context("PERL", cwd="sub")
    await sandbox.interpreter.create_code_context("PERL")
    await sandbox.mkdir("sub")
    result = ok(await sandbox.interpreter.run_code("use Cwd; getcwd()", binding="PERL"))
    assert result.context is not None
    assert (result.context.id, result.context.cwd) == (older.id, "/workspace/sub")
    assert texts(result) == ["/workspace/sub"]


# ----- REPL semantics (spec 7.8) ----------------------------------------------------


async def test_perl_package_variables_persist_but_my_does_not(
    sandbox: SandboxClient, perl_engine: None
) -> None:
    context = await sandbox.interpreter.create_code_context("PERL")
    ok(
        await sandbox.interpreter.run_code(
            "our $kept = 'yes'; my $lost = 'no'; sub twice { 2 * shift }", context=context
        )
    )
    result = ok(
        await sandbox.interpreter.run_code(
            "[$kept, defined($lost) ? 'defined' : 'undef', twice(21)]", context=context
        )
    )
    assert [entry.json for entry in result.results] == [["yes", "undef", 42]]
    # another context of the same binding has its own state
    other = await sandbox.interpreter.create_code_context("PERL")
    fresh = ok(await sandbox.interpreter.run_code("defined $kept ? 1 : 0", context=other))
    assert texts(fresh) == ["0"]


async def test_python_globals_persist(sandbox: SandboxClient, python_engine: None) -> None:
    context = await sandbox.interpreter.create_code_context("PYTHON")
    ok(
        await sandbox.interpreter.run_code(
            "import math\ncounter = 40\ndef bump(n):\n    return n + 1", context=context
        )
    )
    result = ok(
        await sandbox.interpreter.run_code("counter = bump(counter) + 1\ncounter", context=context)
    )
    assert texts(result) == ["42"]
    result = ok(await sandbox.interpreter.run_code("{'pi': round(math.pi, 2)}", context=context))
    assert [entry.json for entry in result.results] == [{"pi": 3.14}]


async def test_python_imports_modules_it_writes_in_the_same_run(
    sandbox: SandboxClient, python_engine: None
) -> None:
    """Python's import system notices a new module by its directory's modification time:
    one that stays the same (0, as an attempt to stat every directory at 0 had it) hid
    a module written after the directory was first listed, within one run or the next."""
    context = await sandbox.interpreter.create_code_context("PYTHON")
    code = (
        'open("/workspace/first.py", "w").write("X = 1\\n"); import first\n'
        'open("/workspace/second.py", "w").write("X = 2\\n"); import second\n'
        "first.X + second.X"
    )
    assert texts(ok(await sandbox.interpreter.run_code(code, context=context))) == ["3"]
    await sandbox.write_file("/workspace/third.py", "X = 3\n")
    result = ok(await sandbox.interpreter.run_code("import third; third.X", context=context))
    assert texts(result) == ["3"]


NESTED = "x = []\nfor _ in range({levels} - 1):\n    x = [x]\nx"
"""A Python value of that many nested lists (its own encoder stops at about 1,000)."""


async def test_a_result_nested_as_deep_as_a_guest_can_is_answered(
    sandbox: SandboxClient, python_engine: None
) -> None:
    """Every hop passes a result's `json` on with Python's `json`, which recurses once per
    level from wherever it runs: 975 levels made the daemon's and `serve`'s answer a 500.
    Deeper than `MAX_RESULT_NESTING` the value comes as its JSON text (documented)."""
    context = await sandbox.interpreter.create_code_context("PYTHON")
    result = ok(await sandbox.interpreter.run_code(NESTED.format(levels=512), context=context))
    (entry,) = result.results
    value, levels = entry.json, 0
    while isinstance(value, list):
        value, levels = value[0] if value else None, levels + 1
    assert levels == 512
    result = ok(await sandbox.interpreter.run_code(NESTED.format(levels=975), context=context))
    assert texts(result) == ["[" * 975 + "]" * 975]
    assert result.results[0].json is None
    assert texts(ok(await sandbox.interpreter.run_code("len(x)", context=context))) == ["1"]


async def test_a_result_holding_a_lone_surrogate_is_answered_and_kept(
    sandbox: SandboxClient, python_engine: None, javascript_engine: None
) -> None:
    """A lone surrogate is a valid JSON string escape that no UTF-8 can hold: a Python
    result with one failed in the host (an EngineError that also dropped the run)."""
    python = await sandbox.interpreter.create_code_context("PYTHON")
    result = ok(await sandbox.interpreter.run_code('kept = 5\n["a\\ud800b"]', context=python))
    assert [entry.json for entry in result.results] == [["a\ud800b"]]
    assert texts(ok(await sandbox.interpreter.run_code("kept", context=python))) == ["5"]
    javascript = await sandbox.interpreter.create_code_context("JAVASCRIPT")
    result = ok(await sandbox.interpreter.run_code('["a\\ud800b"]', context=javascript))
    assert [entry.json for entry in result.results] == [["a\ud800b"]]


async def test_python_cwd_persists(sandbox: SandboxClient, python_engine: None) -> None:
    await sandbox.mkdir("project/src", recursive=True)
    context = await sandbox.interpreter.create_code_context("PYTHON")
    moved = ok(
        await sandbox.interpreter.run_code("import os\nos.chdir('project/src')", context=context)
    )
    assert moved.context is not None and moved.context.cwd == "/workspace/project/src"
    [listed] = await sandbox.interpreter.list_code_contexts()
    assert listed.cwd == "/workspace/project/src"
    result = ok(
        await sandbox.interpreter.run_code(
            "open('here.txt', 'w').write('x')\nos.getcwd()", context=context
        )
    )
    assert texts(result) == ["'/workspace/project/src'"]
    assert (await sandbox.read_file("project/src/here.txt")).content == "x"
    # a cwd that disappears falls back to /workspace
    await sandbox.delete_file("project", recursive=True)
    after = ok(await sandbox.interpreter.run_code("os.getcwd()", context=context))
    assert after.context is not None and after.context.cwd == "/workspace"


# ----- env layering (spec 10.3) -----------------------------------------------------


async def test_env_layering_perl(sandbox: SandboxClient, perl_engine: None) -> None:
    await sandbox.set_env_vars({"A": "sandbox", "B": "sandbox", "C": "sandbox", "U": "sandbox"})
    context = await sandbox.interpreter.create_code_context(
        "PERL", env_vars={"B": "context", "D": "context"}
    )
    result = ok(
        await sandbox.interpreter.run_code(
            PERL_ENV, context=context, env_vars={"C": "call", "E": "call", "U": None}
        )
    )
    assert texts(result) == ["A=sandbox,B=context,C=call,D=context,E=call"]
    # call env vars do not stick; set_env_vars changes apply to later runs
    await sandbox.set_env_vars({"A": None, "F": "new"})
    result = ok(await sandbox.interpreter.run_code(PERL_ENV, context=context))
    assert texts(result) == ["B=context,C=sandbox,D=context,F=new,U=sandbox"]
    # a call can unset a context-level var as well
    result = ok(
        await sandbox.interpreter.run_code(
            PERL_ENV, context=context, env_vars={"B": None, "D": None}
        )
    )
    assert texts(result) == ["C=sandbox,F=new,U=sandbox"]


async def test_guest_env_is_exactly_the_layers_python(
    sandbox: SandboxClient, python_engine: None
) -> None:
    result = ok(await sandbox.interpreter.run_code(PYTHON_ENV, binding="PYTHON"))
    assert texts(result) == ["''"]  # nothing from the host (no HOME, PATH, ...)
    await sandbox.set_env_vars({"S": "1", "Z": "ü"})
    context = await sandbox.interpreter.create_code_context("PYTHON", env_vars={"CTX": "2"})
    result = ok(
        await sandbox.interpreter.run_code(
            PYTHON_ENV, context=context, env_vars={"S": None, "CALL": "3"}
        )
    )
    assert texts(result) == ["'CALL=3,CTX=2,Z=ü'"]


# ----- workspace from guests: rollback, cross-language, limits ------------------------


async def test_failed_run_rolls_back_the_workspace_perl(
    sandbox: SandboxClient, perl_engine: None
) -> None:
    await sandbox.write_file("keep.txt", "original")
    context = await sandbox.interpreter.create_code_context("PERL")
    code = (
        'open my $f, ">", "/workspace/keep.txt" or die; print $f "clobbered"; close $f;'
        'open my $g, ">", "new.txt" or die; print $g "new"; close $g;'
        'mkdir "/workspace/newdir"; unlink "/workspace/gone.txt";'
        'die "after writing\\n"'
    )
    await sandbox.write_file("gone.txt", "still here")
    result = await sandbox.interpreter.run_code(code, context=context)
    assert result.error is not None and result.error.message == "after writing"
    assert (await sandbox.read_file("keep.txt")).content == "original"
    assert (await sandbox.read_file("gone.txt")).content == "still here"
    assert not (await sandbox.exists("new.txt")).exists
    assert not (await sandbox.exists("newdir")).exists
    # and the guest sees the rolled-back tree on its next run
    seen = ok(
        await sandbox.interpreter.run_code(
            'open my $f, "<", "/workspace/keep.txt" or die; local $/; my $c = <$f>;'
            '[$c, -e "/workspace/new.txt" ? 1 : 0]',
            context=context,
        )
    )
    assert [entry.json for entry in seen.results] == [["original", 0]]


async def test_failed_run_rolls_back_the_workspace_python(
    sandbox: SandboxClient, python_engine: None
) -> None:
    code = (
        "with open('/workspace/partial.txt', 'w') as f:\n    f.write('x')\nraise ValueError('nope')"
    )
    result = await sandbox.interpreter.run_code(code, binding="PYTHON")
    assert result.error is not None
    assert (result.error.name, result.error.message) == ("ValueError", "nope")
    assert result.error.traceback[0] == "ValueError: nope"
    assert (await sandbox.list_files()).count == 0


async def test_successful_guest_writes_reach_the_files_api(
    sandbox: SandboxClient, perl_engine: None
) -> None:
    await sandbox.write_file("old.txt", "old")
    code = (
        'mkdir "/workspace/out"; open my $f, ">", "/workspace/out/r.txt" or die;'
        'print $f "result"; close $f; unlink "/workspace/old.txt"; 1'
    )
    ok(await sandbox.interpreter.run_code(code, binding="PERL"))
    assert (await sandbox.read_file("out/r.txt")).content == "result"
    assert not (await sandbox.exists("old.txt")).exists
    listing = await sandbox.list_files(recursive=True)
    assert {f.relative_path: f.type for f in listing.files} == {
        "out": "directory",
        "out/r.txt": "file",
    }


async def test_cross_language_workspace(
    sandbox: SandboxClient, python_engine: None, perl_engine: None
) -> None:
    interpreter = sandbox.interpreter
    python = await interpreter.create_code_context("PYTHON")
    perl = await interpreter.create_code_context("PERL")

    ok(
        await interpreter.run_code(
            "open('/workspace/from_python.txt', 'w').write('hello from python')", context=python
        )
    )
    result = ok(
        await interpreter.run_code(
            'open my $f, "<", "/workspace/from_python.txt" or die "$!"; local $/; <$f>',
            context=perl,
        )
    )
    assert texts(result) == ["hello from python"]

    ok(
        await interpreter.run_code(
            'open my $f, ">", "/workspace/from_perl.txt" or die;'
            'print $f "hello from perl"; close $f; 1',
            context=perl,
        )
    )
    result = ok(
        await interpreter.run_code("open('/workspace/from_perl.txt').read()", context=python)
    )
    assert texts(result) == ["'hello from perl'"]
    # a file written through the API is visible to both, and an update by one to the other
    await sandbox.write_file("shared.txt", "v1")
    ok(await interpreter.run_code("open('shared.txt', 'a').write('+py')", context=python))
    result = ok(
        await interpreter.run_code(
            'open my $f, "<", "shared.txt" or die; local $/; <$f>', context=perl
        )
    )
    assert texts(result) == ["v1+py"]


async def test_cross_language_workspace_javascript(
    sandbox: SandboxClient, javascript_engine: None, perl_engine: None
) -> None:
    interpreter = sandbox.interpreter
    ok(
        await interpreter.run_code(
            'open my $f, ">", "/workspace/p.txt" or die; print $f "from perl"; close $f; 1',
            binding="PERL",
        )
    )
    result = ok(
        await interpreter.run_code(
            "fs.readFileSync('/workspace/p.txt', 'utf8')", binding="JAVASCRIPT"
        )
    )
    assert texts(result) == ["'from perl'"]
    ok(
        await interpreter.run_code(
            "fs.writeFileSync('/workspace/j.txt', 'from js')", binding="JAVASCRIPT"
        )
    )
    result = ok(
        await interpreter.run_code(
            'open my $f, "<", "/workspace/j.txt" or die; local $/; <$f>', binding="PERL"
        )
    )
    assert texts(result) == ["from js"]


# A guest write past a limit fails inside the guest; the guest catches it and goes on, and
# what it wrote before stays (spec 6.1: the reference's own JavaScript case expects
# 'EFBIG', and its file is not created). Python's wasi-libc turns every failed stream
# write into EIO (it never asks the host for the error's code), so Python sees EIO.
EXPECTED_ERRNO = {"PYTHON": "EIO"}
CATCH_LIMIT = {
    "PYTHON": (
        "import errno\n"
        "open('/workspace/before.txt', 'w').write('b')\n"
        "try:\n"
        "    with open('/workspace/{name}', 'wb') as f:\n"
        "        f.write(b'x' * {size})\n"
        "    code = 'none'\n"
        "except OSError as e:\n"
        "    code = errno.errorcode[e.errno]\n"
        "open('/workspace/after.txt', 'w').write('a')\n"
        "code"
    ),
    "PERL": (
        'open my $b, ">", "/workspace/before.txt" or die; print $b "b"; close $b;'
        'open my $f, ">", "/workspace/{name}" or die;'
        'my $done = (print $f ("x" x {size})) && close $f; my $code = $done ? "none" :'
        ' $!{{EFBIG}} ? "EFBIG" : $!{{ENOSPC}} ? "ENOSPC" : "other: $!"; close $f;'
        'open my $a, ">", "/workspace/after.txt" or die; print $a "a"; close $a; $code'
    ),
    "RUBY": (
        'File.write("/workspace/before.txt", "b")\n'
        "code = begin\n"
        '  File.write("/workspace/{name}", "x" * {size}); "none"\n'
        "rescue SystemCallError => e\n"
        "  e.class.name.split('::').last\n"
        "end\n"
        'File.write("/workspace/after.txt", "a")\n'
        "code"
    ),
    "JAVASCRIPT": (
        "fs.writeFileSync('/workspace/before.txt', 'b'); let code;"
        "try {{ fs.writeFileSync('/workspace/{name}', 'x'.repeat({size})); code = 'none' }}"
        " catch (e) {{ code = e.code }}"
        "fs.writeFileSync('/workspace/after.txt', 'a'); code"
    ),
}


def skip_stateless_ruby(backend: Backend, binding: str) -> None:
    if binding == "RUBY" and backend.name == "workerd":
        pytest.skip("the Worker gateway runs Ruby statelessly, as the reference: no /workspace")


@pytest.mark.parametrize("binding", list(CATCH_LIMIT))
async def test_a_write_past_the_file_limit_is_efbig_and_the_run_goes_on(
    backend: Backend, sandbox: SandboxClient, binding: str, all_engines: None
) -> None:
    skip_stateless_ruby(backend, binding)
    await sandbox.write_file("keep.txt", "kept")
    code = CATCH_LIMIT[binding].format(name="huge.bin", size=MiB + 1)
    result = ok(await sandbox.interpreter.run_code(code, binding=binding))
    assert EXPECTED_ERRNO.get(binding, "EFBIG") in str(texts(result)[0])
    for name, content in (("keep.txt", "kept"), ("before.txt", "b"), ("after.txt", "a")):
        assert (await sandbox.read_file(name)).content == content
    if binding == "JAVASCRIPT":  # one call writes the whole file: nothing is created
        assert not (await sandbox.exists("huge.bin")).exists
    elif (await sandbox.exists("huge.bin")).exists:  # a stream is cut at the limit
        assert len((await sandbox.read_file("huge.bin", encoding="base64")).content) <= (
            (MiB + 2) // 3 * 4
        )


async def test_a_python_write_past_the_file_limit_writes_nothing(
    backend: Backend, sandbox: SandboxClient, python_engine: None
) -> None:
    """QA: a 2 MiB `os.write` wrote 1 MiB and returned 1048576 (the stream's write permit
    cut it short), though a write is all or nothing; buffered, it left a 1 MiB file. Both
    now fail and write nothing; a write that fits still goes through."""
    if backend.name == "workerd":
        pytest.skip("the Worker gateway's file limits are the reference's own")
    code = (
        "import os\n"
        "fd = os.open('/workspace/raw.bin', os.O_WRONLY | os.O_CREAT)\n"
        "try:\n"
        "    raw = f'wrote {os.write(fd, b\"z\" * 2 * 1024 * 1024)}'\n"
        "except OSError:\n"
        "    raw = 'refused'\n"
        "os.write(fd, b'a' * 700_000)\n"
        "try:\n"
        "    os.write(fd, b'z' * 400_000)\n"
        "    past = 'written'\n"
        "except OSError:\n"
        "    past = 'refused'\n"
        "os.close(fd)\n"
        "try:\n"
        "    with open('/workspace/buffered.bin', 'wb') as f:\n"
        "        f.write(b'y' * 1_500_000)\n"
        "    buffered = 'written'\n"
        "except OSError:\n"
        "    buffered = 'refused'\n"
        "sizes = [os.path.getsize(f'/workspace/{name}.bin') for name in ('raw', 'buffered')]\n"
        "' '.join([raw, past, buffered, *map(str, sizes)])"
    )
    result = ok(await sandbox.interpreter.run_code(code, binding="PYTHON"))
    assert texts(result) == ["'refused refused refused 700000 0'"]


@pytest.mark.parametrize("binding", list(CATCH_LIMIT))
async def test_a_write_past_the_total_limit_is_enospc_and_the_run_goes_on(
    backend: Backend, sandbox: SandboxClient, binding: str, all_engines: None
) -> None:
    skip_stateless_ruby(backend, binding)
    for index in range(16):
        await sandbox.write_file(f"f{index}.bin", bytes(MiB - 64))
    code = CATCH_LIMIT[binding].format(name="more.bin", size=4096)
    result = ok(await sandbox.interpreter.run_code(code, binding=binding))
    assert EXPECTED_ERRNO.get(binding, "ENOSPC") in str(texts(result)[0])
    info = await sandbox.get_info()
    assert info.workspace_bytes <= 16 * MiB
    assert (await sandbox.read_file("after.txt")).content == "a"


async def test_a_run_that_fails_takes_its_writes_back(
    backend: Backend, sandbox: SandboxClient, all_engines: None
) -> None:
    await sandbox.write_file("keep.txt", "kept")
    failing = {
        "PYTHON": "open('/workspace/gone.txt', 'w').write('x')\n"
        "open('/workspace/keep.txt', 'w').write('changed')\nraise ValueError('no')",
        "PERL": 'open my $f, ">", "/workspace/gone.txt" or die; close $f;'
        ' open my $k, ">", "/workspace/keep.txt" or die; print $k "changed"; close $k; die "no"',
        "RUBY": 'File.write("/workspace/gone.txt", "x");'
        ' File.write("/workspace/keep.txt", "changed"); raise "no"',
        "JAVASCRIPT": "fs.writeFileSync('/workspace/gone.txt', 'x');"
        " fs.writeFileSync('/workspace/keep.txt', 'changed'); throw new Error('no')",
    }
    for binding, code in failing.items():
        if binding == "RUBY" and backend.name == "workerd":
            continue  # stateless there, as the reference: no /workspace
        result = await sandbox.interpreter.run_code(code, binding=binding)
        assert result.error is not None, binding
        assert not (await sandbox.exists("gone.txt")).exists, binding
        assert (await sandbox.read_file("keep.txt")).content == "kept", binding


# ----- serialization and concurrency (spec 1.5) ----------------------------------------


async def test_executions_on_one_sandbox_are_serialized(
    sandbox: SandboxClient, perl_engine: None
) -> None:
    context = await sandbox.interpreter.create_code_context("PERL")
    # Half a second of 8 MB copies: fuel counts loops and calls, and a copy is neither.
    slow = (
        'our @log; push @log, "first"; my $s = "a" x 8e6; my $t = $s . 1 for 1..1000; scalar @log'
    )
    fast = 'our @log; push @log, "second"; join ",", @log'
    first = asyncio.create_task(sandbox.interpreter.run_code(slow, context=context))
    await asyncio.sleep(0.05)
    second = asyncio.create_task(sandbox.interpreter.run_code(fast, context=context))
    one, two = await asyncio.gather(first, second)
    assert texts(ok(one)) == ["1"]
    assert texts(ok(two)) == ["first,second"]
    assert (one.execution_count, two.execution_count) == (1, 2)


async def test_different_sandboxes_run_concurrently(
    backend: Backend, perl_engine: None, python_engine: None
) -> None:
    busy, other = backend.sandbox(fresh_id("busy")), backend.sandbox(fresh_id("other"))
    try:
        ok(await other.interpreter.run_code("1", binding="PERL"))  # boot its engine first
        # Blocked in a host call: no fuel budget ends it before the test does. Long enough
        # to outlast the quick run, short enough where cancel is not offered (workerd).
        looping = asyncio.create_task(
            busy.interpreter.run_code("import time\ntime.sleep(8)", binding="PYTHON")
        )
        await asyncio.sleep(0.5)
        assert not looping.done()
        quick = ok(await other.interpreter.run_code("2 + 2", binding="PERL"))
        assert texts(quick) == ["4"]
        assert not looping.done()  # `other` finished while `busy` was still running
        await busy.cancel()
        await looping
    finally:
        await busy.destroy()
        await other.destroy()


# ----- limits and cancellation --------------------------------------------------------


SPEC_FUEL = {  # spec 9.1, in its units: a tick at every function entry and loop header
    "JAVASCRIPT": (50_000_000, "for (;;) {}"),
    "PYTHON": (100_000_000, "while True:\n    pass"),
    "PERL": (10_000_000, "1 while 1"),
    "RUBY": (30_000_000, "loop {}"),
}


@pytest.mark.parametrize("binding", sorted(SPEC_FUEL))
async def test_fuel_is_the_reference_s_budget_in_its_units(
    sandbox: SandboxClient, binding: str
) -> None:
    require_engine(binding.lower())
    budget, endless = SPEC_FUEL[binding]
    small = ok(await sandbox.interpreter.run_code("1 + 1", binding=binding))
    assert small.usage is not None
    assert small.usage.fuel_limit == budget
    assert 0 < small.usage.fuel_consumed < budget // 20
    stopped = await sandbox.interpreter.run_code(endless, binding=binding)
    assert stopped.error is not None
    assert (stopped.error.name, stopped.error.message) == (
        "ExecutionLimitError",
        "Execution fuel exhausted",
    )


async def test_fuel_exhaustion_is_a_result(sandbox: SandboxClient, perl_engine: None) -> None:
    context = await sandbox.interpreter.create_code_context("PERL")
    ok(await sandbox.interpreter.run_code("our $before = 'ok'; 1", context=context))
    result = await sandbox.interpreter.run_code("1 while 1", context=context)
    assert result.error is not None
    assert result.error.name == "ExecutionLimitError"
    assert result.error.message == "Execution fuel exhausted"
    assert result.error.traceback == []
    assert result.usage is not None
    assert result.usage.fuel_consumed == result.usage.fuel_limit
    assert result.execution_count == 2
    # the instance was reset: the context resumes from the state of the last good run
    after = ok(await sandbox.interpreter.run_code("$before", context=context))
    assert texts(after) == ["ok"]
    assert after.execution_count == 3


async def test_output_limit_is_a_result(sandbox: SandboxClient, perl_engine: None) -> None:
    result = await sandbox.interpreter.run_code('print "x" x 40000; 1', binding="PERL")
    assert result.error is not None
    assert (result.error.name, result.error.message) == (
        "ExecutionLimitError",
        "Output limit exceeded",
    )
    assert texts(ok(await sandbox.interpreter.run_code("1 + 1", binding="PERL"))) == ["2"]


async def test_cancel_stops_a_running_loop(sandbox: SandboxClient, perl_engine: None) -> None:
    context = await sandbox.interpreter.create_code_context("PERL")
    ok(await sandbox.interpreter.run_code("our $state = 'alive'; 1", context=context))
    # 8 MB copies for ever: fuel (loops and calls) would end it only after many seconds.
    endless = 'my $s = "a" x 8e6; my $t = $s . 1 while 1'
    running = asyncio.create_task(sandbox.interpreter.run_code(endless, context=context))
    # cancel() only stops an execution that is running: retry until the loop has started
    deadline = time.monotonic() + 10
    cancelled = False
    while not cancelled and not running.done() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        started = time.monotonic()
        cancelled = await sandbox.cancel()
    assert cancelled is True
    result = await running
    assert time.monotonic() - started < 2.0
    assert result.error is not None
    assert (result.error.name, result.error.message) == (
        "ExecutionLimitError",
        "Execution cancelled",
    )
    after = ok(await sandbox.interpreter.run_code("$state", context=context))
    assert texts(after) == ["alive"]
    # cancelling with nothing running is a no-op
    assert await sandbox.cancel() is False


def busy_perl(seconds: int) -> str:
    """Perl that says it started, then copies 8 MB for about `seconds` (fuel would take
    far longer; `time` counts whole seconds, so it may end up to one early) and answers
    "done"."""
    return (
        f'$| = 1; print "started\\n"; my $end = time + {seconds}; my $s = "a" x 8e6; '
        'my $t = $s . 1 while time < $end; "done"'
    )


BUSY_TWO_SECONDS = busy_perl(2)
UNTIL_GIVEN_UP = busy_perl(60)
"""For a test that gives it up once it has seen what it waited for."""


async def test_a_cancel_that_names_a_context_leaves_another_contexts_run(
    backend: Backend, sandbox: SandboxClient, perl_engine: None
) -> None:
    """Two clients of one sandbox: a cancel that names a context (the TUI's ctrl+g for its
    cell) interrupts a run in that context only; another client's run elsewhere goes on."""
    busy = await sandbox.interpreter.create_code_context("PERL")
    other = await sandbox.interpreter.create_code_context("PERL")

    async def run_until_started() -> asyncio.Task[ExecutionResult]:
        started = asyncio.Event()
        running = asyncio.create_task(
            sandbox.interpreter.run_code(
                BUSY_TWO_SECONDS, context=busy, on_stdout=lambda line: started.set()
            )
        )
        await asyncio.wait_for(started.wait(), 30)
        return running

    running = await run_until_started()
    assert await sandbox.cancel(context_id=other.id) is False
    assert texts(ok(await running)) == ["done"]

    running = await run_until_started()
    assert await sandbox.cancel(context_id=busy.id) is True
    result = await running
    assert result.error is not None
    assert (result.error.name, result.error.message) == (
        "ExecutionLimitError",
        "Execution cancelled",
    )
    for body in ({"contextId": ""}, {"contextId": 7}, ["contextId"]):
        refused = await raises(raw_call(backend, sandbox.id, "POST", "/cancel", body))
        assert refused.http_status == 400, body


# ----- stateless runs (spec 2.2.1, 9.4) ----------------------------------------------


async def test_stateless_run(backend: Backend, perl_engine: None) -> None:
    result = ok(await backend.run_code('print "hi\\n"; our $x = 5; $x * 2', binding="PERL"))
    assert (result.language, result.stdout, texts(result)) == ("perl", ["hi"], ["10"])
    assert result.context is None
    assert result.execution_count is None
    again = ok(await backend.run_code("defined $x ? 'kept' : 'fresh'", binding="PERL"))
    assert texts(again) == ["fresh"]
    no_workspace = ok(
        await backend.run_code('-d "/workspace" ? "mounted" : "absent"', binding="PERL")
    )
    assert texts(no_workspace) == ["absent"]


async def test_stateless_env_vars_are_lenient(backend: Backend, perl_engine: None) -> None:
    result = ok(
        await backend.run_code(
            PERL_ENV,
            binding="PERL",
            env_vars={"GOOD": "1", "1BAD": "2", "a-b": "3", "NULL": None},  # type: ignore[dict-item]
        )
    )
    assert texts(result) == ["GOOD=1"]


async def test_stateless_validation(backend: Backend) -> None:
    # Blank as JavaScript's trim() has it (U+FEFF and U+3000 are, U+001F and U+0085 not).
    for code in ("", "  \n ", "\ufeff\u3000\u2028\xa0"):
        error = await raises(backend.run_code(code, binding="PERL"))
        assert type(error) is ValidationFailedError
        assert (error.http_status, error.message) == (400, "Non-empty code is required")
    for code in ("\x1f", "\x85"):
        result = await backend.run_code(code, binding="JAVASCRIPT")
        assert result.error is not None and result.error.name == "SyntaxError", result
    error = await raises(backend.run_code("#" * 65537, binding="PERL"))
    assert type(error) is ValidationFailedError
    assert (error.http_status, error.message) == (413, "Code exceeds 64 KiB")
    # UTF-8 bytes count: 65,535 characters but 65,537 bytes
    error = await raises(backend.run_code("#" * 65533 + "é" * 2, binding="PERL"))
    assert (error.http_status, error.message) == (413, "Code exceeds 64 KiB")
    error = await raises(backend.run_code("1", binding="NOPE"))
    assert type(error) is ValidationFailedError
    assert (error.http_status, error.message) == (400, "Unknown binding 'NOPE'")
    error = await raises(backend.run_code("1", env_vars={"A": 1}, binding="PERL"))  # type: ignore[dict-item]
    assert (error.http_status, error.message) == (400, "envVars values must be strings")


async def test_stateless_limits_drop_logs_and_usage(backend: Backend, perl_engine: None) -> None:
    result = await backend.run_code('print "x" x 40000; 1', binding="PERL")
    assert result.error is not None
    assert (result.error.name, result.error.message) == (
        "ExecutionLimitError",
        "Output limit exceeded",
    )
    assert (result.stdout, result.stderr, result.results, result.usage) == ([], [], [], None)


async def test_runtimes_are_listed(backend: Backend) -> None:
    runtimes = {runtime.binding: runtime for runtime in await backend.runtimes()}
    assert {"PYTHON", "PERL"} <= set(runtimes)
    assert runtimes["PERL"].language == "perl"
    assert runtimes["PERL"].contexts is True
    assert runtimes["PERL"].protocol == 1
