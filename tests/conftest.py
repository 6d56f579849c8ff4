"""Shared fixtures: real engines prepared once per test run, in parallel; a private
runtime and state dir for the test run's local daemons, none of which outlives its test."""

from __future__ import annotations

import compileall
import contextlib
import fnmatch
import gc
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from engines.cache import EngineCache
from engines.language import PrepareError
from engines.registry import LANGUAGES, language_engine, missing_requirements
from tests.cli_fork_server import DAEMON_COMMAND_ENV, FORK_SERVER
from workbench.backends.daemon import client as daemon_client
from workbench.backends.daemon import probe, stop_at

_PREPARED: dict[str, str | None] = {}
"""language -> None when ready, else why it cannot be prepared."""


def pytest_configure(config: pytest.Config) -> None:
    """Compile the project's modules once, in the controller: the processes the tests
    start (CLI commands, daemons, `serve`) then load bytecode. Where
    PYTHONDONTWRITEBYTECODE is set, as on CI, each of them compiled what it imported again
    (a CLI `run` took 0.38 s instead of 0.24)."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did it
        return
    if config.getoption("disable_plugin_autoload"):
        # Workers get the plugins named in addopts but not the flag (pytest reads only
        # the environment there): without it they would rewrite every plugin's modules.
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    root = Path(__file__).resolve().parent.parent
    for package in ("workbench", "engines", "tour"):
        compileall.compile_dir(root / package, quiet=1)
    _compile_the_tests(config, root / "tests")


def _compile_the_tests(config: pytest.Config, tests: Path) -> None:
    """Compile the test modules once, in the controller, for the workers to load. Each
    worker imports all of them to collect, and pytest rewrites a test module's asserts
    before compiling it: with PYTHONDONTWRITEBYTECODE set, every worker did both for all
    of them (5 of the 8.5 s of CPU a worker spent collecting). The rewritten code goes
    where pytest caches it, which the workers read whatever that variable says; it is
    made by pytest's own private helpers, so if those change the workers rewrite as
    before. Two forked processes share the work (the machine has two cores)."""
    try:
        from _pytest.assertion.rewrite import (
            PYC_TAIL,
            _read_pyc,
            _rewrite_test,
            _write_pyc_fp,
            get_cache_dir,
        )
    except ImportError:
        rewritten: list[str] = []
    else:
        rewritten = [*config.getini("python_files"), "conftest.py"]
    # pytest takes a cached module as current while its size and modification second
    # match: one edited within the second the cache was written from could run stale.
    settled = time.time() - 2
    modules = [module for module in sorted(tests.rglob("*.py")) if module.stat().st_mtime < settled]
    children = []
    for share in (modules[0::2], modules[1::2]):
        pid = os.fork()
        if pid != 0:
            children.append(pid)
            continue
        try:
            for module in share:
                with contextlib.suppress(Exception):  # a worker meets it again, and says
                    if not any(fnmatch.fnmatch(module.name, pattern) for pattern in rewritten):
                        compileall.compile_file(module, quiet=1)
                        continue
                    cached = get_cache_dir(module) / (module.name[:-3] + PYC_TAIL)
                    if _read_pyc(module, cached) is not None:
                        continue
                    source_stat, code = _rewrite_test(module, config)
                    cached.parent.mkdir(parents=True, exist_ok=True)
                    partial = cached.with_name(f"{cached.name}.{os.getpid()}")
                    with open(partial, "wb") as file:
                        _write_pyc_fp(file, source_stat, code)
                    os.replace(partial, cached)
        finally:
            os._exit(0)  # a forked child never returns into pytest
    for pid in children:
        os.waitpid(pid, 0)


def pytest_collection_finish() -> None:
    """Keep the cyclic garbage collector off what every test shares. A worker holds some
    400,000 objects (the imports, Textual's caches), and each full collection walked all
    of them: 0.3 s, a fifth of the TUI tests' time. What exists once the tests are
    collected lives to the end, so it is frozen out of the collections, and young objects
    are collected ten times less often (Textual makes many per frame), so garbage in
    cycles may outlive its test a little; a test that needs it gone collects it."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(7000, 10, 10)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Drop the widgets Textual keeps after their app ended: `StylesCache.get_inner_outer`
    is an `lru_cache` on a method, so its keys hold up to 1,024 style caches of dead
    widgets with their rendered lines (about 25,000 strips), which every collection then
    walks."""
    styles_cache = sys.modules.get("textual._styles_cache")
    if styles_cache is not None:
        styles_cache.StylesCache.get_inner_outer.cache_clear()


def _prepare(language: str) -> str | None:
    try:
        EngineCache(language_engine(language)).prepare()
    except PrepareError as error:
        return str(error)
    return None


def prepare_engines(*languages: str) -> dict[str, str | None]:
    """Prepare (fetch/build/compile once, then cached) the named engines in parallel."""
    wanted = [language for language in languages if language not in _PREPARED]
    if wanted:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            for language, problem in zip(wanted, pool.map(_prepare, wanted), strict=True):
                _PREPARED[language] = problem
    return {language: _PREPARED[language] for language in languages}


def require_engine(language: str) -> None:
    """Skip when a host tool the engine needs is missing (say which); fail on any other
    preparation problem, since every engine is part of the suite."""
    missing = missing_requirements(language_engine(language))
    if missing:
        pytest.skip(f"{language} engine needs {missing[0].program}, which is not installed")
    # The first engine a run needs prepares all of them in parallel: on a fresh machine
    # that overlaps the downloads and compiles instead of paying for them one by one.
    prepare_engines(*preparable_languages())
    problem = prepare_engines(language)[language]
    if problem is not None:
        pytest.fail(f"{language} engine could not be prepared: {problem}")


def javascript_cache_missing_a_module(root: Path) -> EngineCache:
    """A private copy (under `root`) of the prepared JavaScript engine without its
    smallest compiled core module: preparing it compiles that module and reuses the others
    (seconds; compiling Perl's one module takes twenty), and reports each step."""
    require_engine("javascript")
    engine = language_engine("javascript")
    private = EngineCache(engine, root=root)
    shutil.copytree(
        EngineCache(engine).directory, private.directory, ignore=shutil.ignore_patterns(".lock")
    )
    build = private.build()
    assert build is not None
    modules = private.compiled_path(build).glob("*.cwasm")
    min(modules, key=lambda path: path.stat().st_size).unlink()
    assert not private.is_ready()
    return private


def preparable_languages() -> list[str]:
    """Languages whose host tools are installed."""
    return [lang for lang in LANGUAGES if not missing_requirements(language_engine(lang))]


@pytest.fixture(scope="session")
def all_engines() -> Iterator[None]:
    """Every preparable engine, prepared in parallel up front."""
    problems = {k: v for k, v in prepare_engines(*preparable_languages()).items() if v is not None}
    if problems:
        pytest.fail(f"engines could not be prepared: {problems}")
    yield


@pytest.fixture
def python_engine() -> None:
    require_engine("python")


@pytest.fixture
def perl_engine() -> None:
    require_engine("perl")


@pytest.fixture
def javascript_engine() -> None:
    require_engine("javascript")


@pytest.fixture
def ruby_engine() -> None:
    require_engine("ruby")


@pytest.fixture(scope="session", autouse=True)
def private_daemon_dirs() -> Iterator[Path]:
    """The runtime and state dirs of every daemon a test starts (short: socket paths are
    bounded), instead of the user's."""
    runtime = Path(tempfile.mkdtemp(prefix="sbw-run-"))
    saved = {key: os.environ.get(key) for key in (RUNTIME_ENV, STATE_ENV)}
    os.environ[RUNTIME_ENV] = str(runtime / "run")
    os.environ[STATE_ENV] = str(runtime / "state")
    try:
        yield runtime / "run"
    finally:
        stop_daemons(runtime / "run")
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def cli_fork_server() -> Iterator[None]:
    """This worker's CLI fork server (`tests.cli_fork_server`), started before any test
    can change the umask, limits or environment it would start with."""
    FORK_SERVER.start()
    yield
    FORK_SERVER.stop()


@pytest.fixture(autouse=True)
def daemons_forked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemons this test and its CLI commands start are forked from the worker's CLI
    fork server (`tests.cli_fork_server` says why), unless it is marked
    `daemon_command`."""
    if request.node.get_closest_marker("daemon_command") is not None:
        monkeypatch.setenv(DAEMON_COMMAND_ENV, "1")
    else:
        monkeypatch.setattr(daemon_client, "_launch", FORK_SERVER.start_daemon)


@pytest.fixture(autouse=True)
def no_daemon_left(private_daemon_dirs: Path) -> Iterator[None]:
    """Stop every daemon the test started (its snapshots written first); a `serve`, which
    its own fixture stops, stays."""
    yield
    stop_daemons(private_daemon_dirs, keep_serve=True)


def stop_daemons(runtime: Path, *, keep_serve: bool = False) -> None:
    for socket in _sockets(runtime):
        info = probe(socket)
        if info is not None and not (keep_serve and info.tcp is not None):
            stop_at(socket)


def _sockets(runtime: Path) -> list[Path]:
    return list(runtime.glob("*.sock")) if runtime.is_dir() else []


RUNTIME_ENV = "SANDBOX_WORKBENCH_RUNTIME_DIR"
STATE_ENV = "SANDBOX_WORKBENCH_STATE_DIR"


def _quick_idle_checks() -> None:
    """Textual's Pilot waits, after each key, until the process has been idle for one
    sleep of `SLEEP_GRANULARITY` (20 ms), twice: typing a 40-key env line took 3.7 s,
    most of the TUI tests' time. A 2.5 ms sleep with the same idle ratio (under 5% of CPU)
    tells the same thing. Tests still wait for what they assert (`tour.wait_for`)."""
    import textual._wait

    textual._wait.SLEEP_GRANULARITY = 1 / 400
    textual._wait.SLEEP_IDLE = textual._wait.SLEEP_GRANULARITY / 20.0


_quick_idle_checks()


def wake_ups(pids: list[int]) -> int:
    """Voluntary context switches of every thread of `pids` so far: how often they woke
    up (an idle process that polls keeps adding to it)."""
    total = 0
    for pid in pids:
        for status_file in Path(f"/proc/{pid}/task").glob("*/status"):
            with contextlib.suppress(OSError):
                for line in status_file.read_text().splitlines():
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
    return total
