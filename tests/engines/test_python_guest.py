"""The real CPython 3.14 component (componentize-py) against spec 3.2, 3.3, 7.8, 9.3, 9.4, 10."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import wasmtime

from engines.proto import envelope_pb2
from engines.python import ENGINE
from engines.python.engine import guest_python_version
from engines.python.pins import PYTHON_VERSION
from engines.vfs import VirtualFS
from tests.engines.prepared import put_dirs, put_files
from tests.engines.python_harness import Guest, Prepared, prepare_component

pytestmark = pytest.mark.slow


# The same fixtures as test_javascript_guest.py's, each over its own language's harness.
@pytest.fixture(scope="session")
def prepared() -> Iterator[Prepared]:
    yield prepare_component()
    time.sleep(0.1)  # let wasmtime's stdout callbacks finalize before interpreter exit


@pytest.fixture(scope="module")
def stateless(prepared: Prepared) -> Iterator[Guest]:
    """One instance serving stateless runs (no /workspace), as the framework may reuse it."""
    guest = Guest(prepared)
    yield guest
    guest.close()


@pytest.fixture
def workspace() -> VirtualFS:
    return VirtualFS()


@pytest.fixture
def session(prepared: Prepared, workspace: VirtualFS) -> Iterator[Guest]:
    guest = Guest(prepared, workspace)
    yield guest
    guest.close()


# --- metadata ------------------------------------------------------------------------------


def test_engine_description(prepared: Prepared, stateless: Guest) -> None:
    assert ENGINE.language == "python"
    assert ENGINE.kind == "component"
    assert ENGINE.snapshots is True
    assert ENGINE.contexts is True
    assert ENGINE.memory_bytes == 64 << 20
    assert guest_python_version(prepared.wasm.read_bytes()) == PYTHON_VERSION
    assert stateless.run("import sys; sys.version.split()[0]").text == repr(PYTHON_VERSION)
    assert ENGINE.engine.startswith(f"CPython {PYTHON_VERSION} / componentize-py ")


# --- spec 3.2: result mapping --------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "text"),
    [
        ("1 + 1", "2"),
        ("'hi'", "'hi'"),
        ('"it\'s"', '"it\'s"'),
        ("True", "True"),
        ("3.14", "3.14"),
        ("(1, 2)", "(1, 2)"),
        ("{3}", "{3}"),
        ("b'x'", "b'x'"),
        ("1 + 2j", "(1+2j)"),
        ("[float('nan')]", "[nan]"),
        ("{'a': float('inf')}", "{'a': inf}"),
        ("{(1, 2): 3}", "{(1, 2): 3}"),
        ("[1, {2}]", "[1, {2}]"),
        ("a = []\na.append(a)\na", "[[...]]"),
        ("class C:\n    def __repr__(self):\n        return 'C!'\nC()", "C!"),
        ("[C for C in [type]]", "[<class 'type'>]"),
    ],
)
def test_text_results(stateless: Guest, code: str, text: str) -> None:
    run = stateless.run(code)
    assert run.error is None, run.error
    assert run.text == text


@pytest.mark.parametrize(
    ("code", "value"),
    [
        ("{'a': [1, 2.5, None, True, 'x']}", {"a": [1, 2.5, None, True, "x"]}),
        ("[1, 2]", [1, 2]),
        ("[]", []),
        ("{1: 'int keys become strings'}", {"1": "int keys become strings"}),
        ("import collections\ncollections.OrderedDict(b=1)", {"b": 1}),
        ("[[['deep']]]", [[["deep"]]]),
    ],
)
def test_json_results(stateless: Guest, code: str, value: object) -> None:
    run = stateless.run(code)
    assert run.error is None, run.error
    assert run.text is None
    assert run.json == value


@pytest.mark.parametrize(
    "code", ["None", "x = 1", "def f():\n    return 2", "print('side effect')", "pass", "# only"]
)
def test_no_result(stateless: Guest, code: str) -> None:
    run = stateless.run(code)
    assert run.error is None, run.error
    assert not run.has_result


def test_only_trailing_expression_is_the_result(stateless: Guest) -> None:
    run = stateless.run("1\n2\nif True:\n    3")
    assert not run.has_result
    assert stateless.run("x = 5\nx * 2").text == "10"


# --- spec 3.3: errors ----------------------------------------------------------------------


def test_exception_with_frames(stateless: Guest) -> None:
    run = stateless.run("def f():\n    raise ValueError('boom')\n\nf()")
    assert run.error is not None
    assert (run.error.name, run.error.message) == ("ValueError", "boom")
    assert list(run.error.traceback) == [
        "ValueError: boom",
        '  File "<sandbox>", line 4, in <module>',
        '  File "<sandbox>", line 2, in f',
    ]


def test_exception_in_trailing_expression(stateless: Guest) -> None:
    run = stateless.run("x = 1\nx / 0")
    assert run.error is not None
    assert (run.error.name, run.error.message) == ("ZeroDivisionError", "division by zero")
    assert list(run.error.traceback) == [
        "ZeroDivisionError: division by zero",
        '  File "<sandbox>", line 2, in <module>',
    ]
    assert not run.has_result


def test_stdlib_frames_are_kept_driver_frames_dropped(stateless: Guest) -> None:
    run = stateless.run("import json\njson.loads('{bad')")
    assert run.error is not None
    assert run.error.name == "JSONDecodeError"
    lines = list(run.error.traceback)
    assert lines[0] == f"JSONDecodeError: {run.error.message}"
    assert lines[1] == '  File "<sandbox>", line 2, in <module>'
    assert all(line.startswith('  File "') for line in lines[1:])
    assert any("json" in line for line in lines[2:])
    assert not any("sbw_driver" in line for line in lines)


def test_recursion_error_collapses_repeated_frames(stateless: Guest) -> None:
    run = stateless.run("def f(n):\n    return f(n + 1)\n\nf(0)")
    assert run.error is not None
    assert run.error.name == "RecursionError"
    lines = list(run.error.traceback)
    assert lines[1] == '  File "<sandbox>", line 4, in <module>'
    assert lines[2:5] == ['  File "<sandbox>", line 2, in f'] * 3
    assert lines[5].startswith("  [Previous line repeated ")
    assert len(lines) == 6
    assert stateless.run("'usable'").text == "'usable'"


def test_syntax_error(stateless: Guest) -> None:
    run = stateless.run("x = 1\ndef f(:\n    pass")
    assert run.error is not None
    assert run.error.name == "SyntaxError"
    assert "<sandbox>, line 2" in run.error.message
    assert list(run.error.traceback) == [f"SyntaxError: {run.error.message}"]


def test_name_error_and_custom_exception(stateless: Guest) -> None:
    run = stateless.run("undefined_name")
    assert run.error is not None
    assert (run.error.name, run.error.message) == (
        "NameError",
        "name 'undefined_name' is not defined",
    )
    run = stateless.run("class Oops(Exception):\n    pass\nraise Oops('a', 2)")
    assert run.error is not None
    assert (run.error.name, run.error.message) == ("Oops", "('a', 2)")


def test_exception_without_message(stateless: Guest) -> None:
    run = stateless.run("raise KeyboardInterrupt")
    assert run.error is not None
    assert (run.error.name, run.error.message) == ("KeyboardInterrupt", "")
    assert run.error.traceback[0] == "KeyboardInterrupt"


def test_failing_repr_is_an_error(stateless: Guest) -> None:
    run = stateless.run(
        "class R:\n    def __repr__(self):\n        raise TypeError('no repr')\nR()"
    )
    assert run.error is not None
    assert (run.error.name, run.error.message) == ("TypeError", "no repr")
    assert run.error.traceback[-1] == '  File "<sandbox>", line 3, in __repr__'


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("import sys\nsys.exit(3)", "3"),
        ("exit()", "None"),
        ("quit(0)", "0"),
        ("raise SystemExit('bye')", "bye"),
        ("import os\nos._exit(1)", "1"),
        ("import os\nos.abort()", "134"),
    ],
)
def test_exit_does_not_kill_the_guest(stateless: Guest, code: str, message: str) -> None:
    run = stateless.run(f"print('before')\n{code}")
    assert run.error is not None
    assert (run.error.name, run.error.message) == ("SystemExit", message)
    assert run.stdout == "before\n"
    assert stateless.run("'still alive'").text == "'still alive'"


# --- output ---------------------------------------------------------------------------------


def test_stdout_and_stderr_are_flushed(stateless: Guest) -> None:
    run = stateless.run(
        "import sys\nprint('héllo ✓')\nprint('err', file=sys.stderr)\nprint('no newline', end='')"
    )
    assert run.stdout == "héllo ✓\nno newline"
    assert run.stderr == "err\n"


def test_output_before_an_error_is_kept(stateless: Guest) -> None:
    run = stateless.run("print('one')\n1/0")
    assert run.stdout == "one\n"
    assert run.error is not None


# --- environment (spec 10) -----------------------------------------------------------------


@pytest.mark.parametrize("session_mode", [False, True])
def test_environment_is_exactly_env(
    prepared: Prepared, workspace: VirtualFS, session_mode: bool
) -> None:
    guest = Guest(prepared, workspace if session_mode else None)
    try:
        run = guest.run(
            "import os\ndict(os.environ)",
            session=session_mode,
            env={"GREETING": "hola", "UNICODE": "ñ ✓"},
        )
        assert run.json == {"GREETING": "hola", "UNICODE": "ñ ✓"}
        run = guest.run(
            "import os\n(dict(os.environ), os.getenv('HOME'))",
            session=session_mode,
            env={"OTHER": "1"},
        )
        assert run.text == "({'OTHER': '1'}, None)"
        assert guest.run("import os\nlen(os.environ)", session=session_mode).text == "0"
    finally:
        guest.close()


@pytest.mark.parametrize("session_mode", [False, True])
def test_a_stateless_environ_is_a_plain_dict(
    prepared: Prepared, workspace: VirtualFS, session_mode: bool
) -> None:
    """Spec 9.4: a plain dict in a stateless run; a context's is refilled (spec 7.8)."""
    guest = Guest(prepared, workspace if session_mode else None)
    try:
        run = guest.run(
            "import os\n(type(os.environ) is dict, os.getenv('A'), os.environ is os.environ)",
            session=session_mode,
            env={"A": "1"},
        )
        assert run.text == f"({not session_mode}, '1', True)"
    finally:
        guest.close()


# --- stateless semantics (spec 9.4) ---------------------------------------------------------


def test_stateless_namespace_is_fresh(stateless: Guest) -> None:
    assert stateless.run("sorted(globals())").json == ["__builtins__", "__name__"]
    assert stateless.run("__name__").text == "'__main__'"
    stateless.run("leak = 1")
    run = stateless.run("leak")
    assert run.error is not None and run.error.name == "NameError"


def test_stateless_has_no_workspace(stateless: Guest) -> None:
    run = stateless.run("import os, sys\n(os.path.exists('/workspace'), '/workspace' in sys.path)")
    assert run.text == "(False, False)"
    assert stateless.run("print('x')").response.cwd == ""


def test_dataclasses_and_pickle_work_in_main(stateless: Guest) -> None:
    code = (
        "from dataclasses import dataclass\nimport pickle\n"
        "@dataclass\nclass P:\n    x: int\n"
        "pickle.loads(pickle.dumps(P(1)))"
    )
    assert stateless.run(code).text == "P(x=1)"


def test_stdlib_is_available(stateless: Guest) -> None:
    code = (
        "import datetime, sqlite3, decimal, json, fractions, statistics, re, zoneinfo, asyncio\n"
        "import collections, itertools, hashlib, csv, io, textwrap, base64, uuid, heapq\n"
        "db = sqlite3.connect(':memory:')\n"
        "[str(decimal.Decimal('1.1') + 1), db.execute('select 40 + 2').fetchone()[0],\n"
        " datetime.date(2024, 2, 29).isoformat(), str(fractions.Fraction(1, 3) * 3),\n"
        " statistics.mean([1, 2, 3]), hashlib.sha256(b'').hexdigest()[:8],\n"
        " asyncio.run(asyncio.wait_for(asyncio.sleep(0.01, 'async'), 5))]"
    )
    run = stateless.run(code)
    assert run.error is None, run.error
    assert run.json == ["2.1", 42, "2024-02-29", "1", 2, "e3b0c442", "async"]


def test_random_differs_between_instances(prepared: Prepared) -> None:
    values = []
    for _ in range(2):
        guest = Guest(prepared)
        values.append(guest.run("import random\nrandom.random()").text)
        guest.close()
    assert values[0] != values[1]


# --- sessions (spec 7.8, 7.4) ---------------------------------------------------------------


def test_session_state_persists(session: Guest) -> None:
    assert not session.run("x = 41", session=True).has_result
    assert session.run("x + 1", session=True).text == "42"
    session.run("import math\ndef area(r):\n    return math.pi * r * r", session=True)
    assert session.run("round(area(1), 2)", session=True).text == "3.14"
    assert session.run("__name__", session=True).text == "'__main__'"
    assert session.run("import sys\nsys.path[0]", session=True).text == "'/workspace'"


def test_session_state_survives_errors(session: Guest) -> None:
    session.run("y = 1", session=True)
    assert session.run("y = 2\nraise RuntimeError('x')", session=True).error is not None
    assert session.run("y", session=True).text == "2"


def test_session_and_stateless_runs_do_not_share_globals(session: Guest) -> None:
    session.run("shared = 1", session=True)
    run = session.run("shared", session=False)
    assert run.error is not None and run.error.name == "NameError"
    assert session.run("shared", session=True).text == "1"


def test_workspace_read_write(session: Guest, workspace: VirtualFS) -> None:
    put_files(workspace, {"host.txt": "from host"})
    run = session.run(
        "import os\nopen('/workspace/guest.txt', 'w').write('from guest')\n"
        "(open('/workspace/host.txt').read(), sorted(os.listdir('/workspace')))",
        session=True,
    )
    assert run.text == "('from host', ['guest.txt', 'host.txt'])"
    assert workspace.files() == {"host.txt": b"from host", "guest.txt": b"from guest"}


def test_workspace_modules_are_importable(session: Guest, workspace: VirtualFS) -> None:
    session.run("1", session=True)  # the importer has seen /workspace before the file exists
    put_files(workspace, {"helper.py": "def twice(v):\n    return 2 * v\n"})
    assert session.run("import helper\nhelper.twice(21)", session=True).text == "42"


def test_cwd_is_reported_and_restored(session: Guest, workspace: VirtualFS) -> None:
    put_dirs(workspace, "sub/deeper")
    run = session.run("import os\nos.chdir('sub/deeper')", session=True)
    assert run.response.cwd == "/workspace/sub/deeper"
    run = session.run("import os\nos.getcwd()", session=True, cwd="/workspace/sub")
    assert run.text == "'/workspace/sub'"
    assert run.response.cwd == "/workspace/sub"
    assert session.run("open('rel.txt', 'w').write('r')", session=True, cwd="/workspace/sub").text
    assert workspace.state("sub/rel.txt").data == b"r"


def test_cwd_falls_back_to_workspace(session: Guest, workspace: VirtualFS) -> None:
    put_dirs(workspace, "gone")
    run = session.run(
        "import os\nos.chdir('/workspace/gone')\nos.rmdir('/workspace/gone')", session=True
    )
    assert run.response.cwd == "/workspace"
    run = session.run("import os\nos.getcwd()", session=True, cwd="/workspace/missing")
    assert run.error is None
    assert run.response.cwd == "/workspace"
    assert workspace.state("gone").kind == "absent"


# --- isolation (spec 9.3) --------------------------------------------------------------------


def test_host_files_are_unreachable(session: Guest, workspace: VirtualFS, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    put_files(workspace, {"sub/f.txt": "inside"})
    attempts = {
        "etc": "open('/etc/passwd').read()",
        "host_path": f"open({str(secret)!r}).read()",
        "dotdot": "open('/workspace/../secret.txt').read()",
        "relative": "open('../secret.txt').read()",
        "deeper": "import os\nos.chdir('sub')\nopen('../../secret.txt').read()",
        "new_symlink": f"import os\nos.symlink({str(secret)!r}, '/workspace/l2')",
        "new_hardlink": "import os\nos.link('/workspace/sub/f.txt', '/workspace/l3')",
        "move_out": "import os\nos.rename('/workspace/sub/f.txt', '/workspace/../f.txt')",
        "root": "import os\nos.listdir('/')",
    }
    for label, code in attempts.items():
        run = session.run(code, session=True)
        assert run.error is not None, label
        assert run.error.name in {"FileNotFoundError", "PermissionError", "OSError"}, label
        assert "host secret" not in run.stdout + run.stderr + run.error.message
    assert workspace.files() == {"sub/f.txt": b"inside"}
    assert secret.read_text() == "host secret"


@pytest.mark.parametrize(
    "code",
    [
        "import socket\nsocket.getaddrinfo('pypi.org', 443)",
        "import socket\nsocket.create_connection(('151.101.0.223', 443), timeout=2)",
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "s.sendto(b'x', ('1.1.1.1', 53))",
        "import socket\ns = socket.socket()\ns.bind(('0.0.0.0', 8765))\ns.listen()",
        "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=2)",
    ],
)
def test_network_is_denied(stateless: Guest, code: str) -> None:
    run = stateless.run(code)
    assert run.error is not None
    assert run.error.name in {"PermissionError", "gaierror", "URLError", "OSError"}


# --- limits ---------------------------------------------------------------------------------


def test_memory_cap_gives_memory_error(session: Guest) -> None:
    session.run("keep = 'state'", session=True)
    run = session.run("big = bytearray(100 << 20)", session=True)
    assert run.error is not None
    assert run.error.name == "MemoryError"
    assert session.run("keep", session=True).text == "'state'"


def test_growth_below_the_cap_works(session: Guest) -> None:
    assert session.run("len(bytearray(16 << 20))", session=True).text == str(16 << 20)


def test_fuel_traps_an_infinite_loop(prepared: Prepared) -> None:
    guest = Guest(prepared)
    started = time.perf_counter()
    with pytest.raises(wasmtime.WasmtimeError) as trapped:
        guest.run("while True:\n    pass")
    elapsed = time.perf_counter() - started
    print(f"fuel {ENGINE.fuel} trapped after {elapsed:.2f} s")
    assert "unreachable" in str(trapped.value)
    assert guest.instance.meter.remaining == 0
    assert elapsed < 10
    with pytest.raises(wasmtime.WasmtimeError):  # a trapped instance refuses re-entry
        guest.run("1")
    guest.close()


def test_epoch_interrupts(prepared: Prepared) -> None:
    guest = Guest(prepared)
    watchdog = threading.Timer(0.2, prepared.engine.increment_epoch)
    watchdog.start()
    started = time.perf_counter()
    # A hundred times the engine's fuel (about 20 s of this loop), so that only the epoch
    # can stop it even when the timer thread is late on a loaded machine.
    request = envelope_pb2.ExecuteRequest(code="while True:\n    pass")
    with pytest.raises(wasmtime.WasmtimeError) as trapped:
        guest.call(request, fuel=ENGINE.fuel * 100)
    watchdog.join()
    assert "interrupt" in str(trapped.value)
    assert time.perf_counter() - started < 5  # far below the fuel's 20 s, a late timer allowed
    guest.close()


def test_warm_call_is_fast(stateless: Guest) -> None:
    timings = []
    for _ in range(50):
        started = time.perf_counter()
        stateless.run("1+1")
        timings.append(time.perf_counter() - started)
    assert statistics.median(timings) < 0.01


def test_cold_start(prepared: Prepared) -> None:
    started = time.perf_counter()
    guest = Guest(prepared)
    assert guest.run("1+1").text == "2"
    elapsed = time.perf_counter() - started
    guest.close()
    assert elapsed < 0.5


def test_long_lines_are_not_truncated(stateless: Guest) -> None:
    run = stateless.run("print('x' * 100000)\nimport os\nprint('y', flush=True)")
    assert run.stdout == "x" * 100000 + "\ny\n"


def test_prints_are_coalesced_into_few_writes(stateless: Guest) -> None:
    run = stateless.run(
        "import sys\nfor i in range(500):\n    print(i)\n    print(i, file=sys.stderr)"
    )
    assert run.stdout.splitlines() == [str(i) for i in range(500)]
    assert run.stderr.splitlines() == [str(i) for i in range(500)]
    assert stateless.output.writes <= 4


def test_large_values_are_returned(stateless: Guest) -> None:
    assert json.loads(stateless.run("list(range(5000))").response.result.json) == list(range(5000))


def test_prepare_rejects_wrong_componentize_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from engines.language import PrepareError
    from engines.python import engine as python_engine

    monkeypatch.setattr("engines.python.engine.metadata.version", lambda name: "0.0.1")
    with pytest.raises(PrepareError, match="pinned"):
        python_engine.componentize_py_dir()
