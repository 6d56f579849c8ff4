"""A daemon replaced under a client that lives long: every answer names the daemon that
gave it, the workbench notices another one and says what changed, and a client that
reconnects takes the daemon it finds rather than replacing it in turn."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.cli import cli_env, run_cli
from tests.tui.test_flows import Notifications
from tour import until_connected, wait_for
from workbench.backends.daemon import open_daemon_backend, probe, socket_path, stop
from workbench.backends.daemon.client import DaemonBackend, _spawn_lock, _start
from workbench.config import RUBY_CONTEXTS_ENV, LocalSettings
from workbench.paths import private_data_dir
from workbench.profiles import LOCAL
from workbench.protocol.types import RuntimeInfo
from workbench.tui.app import WorkbenchApp

pytestmark = pytest.mark.slow


async def test_every_answer_names_the_daemon_and_the_client_that_started_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RUBY_CONTEXTS_ENV, "1")
    backend = open_daemon_backend(tmp_path / "data")
    assert isinstance(backend, DaemonBackend)
    try:
        info = probe(socket_path(private_data_dir(tmp_path / "data").absolute()))
        assert info is not None and info.started_by == os.getpid()
        backend.socket_transport.daemon = None  # what it found at open: the answer says
        health = await backend.health()
        assert health["daemon"] == {
            "pid": info.pid,
            "startedAt": info.started_at,
            "version": info.version,
            "settings": {"rubyContexts": True, "fileApi": True},
            "startedBy": os.getpid(),
        }
        assert backend.served_by == f"daemon pid {info.pid}"
        await backend.list_sandboxes()  # any answer carries it, not only health
        assert backend.socket_transport.daemon == info.identity
    finally:
        await backend.aclose()


async def test_a_client_reconnecting_during_a_replacement_takes_the_new_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two clients of different settings replaced each other's daemon whenever a request
    of one fell in the other's replacement: measured with two clients asking every 50 ms,
    46 daemons in 30 s. The reconnecting client now takes the daemon it finds."""
    monkeypatch.setenv(RUBY_CONTEXTS_ENV, "1")
    data = tmp_path / "data"
    backend = open_daemon_backend(data)  # Ruby contexts on, as the workbench asked
    directory = private_data_dir(data).absolute()
    path = socket_path(directory)
    try:
        with _spawn_lock(directory):  # another client replaces the daemon, as a CLI does
            stop(path, directory)
            request = asyncio.create_task(backend.health())  # falls in the replacement
            await asyncio.sleep(0.3)
            assert not request.done()  # waiting for the spawn lock
            other = LocalSettings(ruby_contexts=False)
            replacement = await asyncio.to_thread(_start, directory, path, other, None)
        health = await request
        assert health["daemon"]["pid"] == replacement.pid
        assert health["daemon"]["settings"] == {"rubyContexts": False, "fileApi": True}
        running = probe(path)
        assert running is not None and running.pid == replacement.pid
    finally:
        await backend.aclose()


async def test_the_workbench_notices_a_daemon_another_client_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workbench started with Ruby contexts on; a command from a shell without them
    restarted the daemon. The status bar kept the old pid and F3 offered Ruby contexts
    until F5; now the next health check finds the new daemon, says so, and reads the
    runtimes again. The workbench does not restart it back."""
    env = cli_env(tmp_path)
    for name in ("SANDBOX_WORKBENCH_DATA_DIR", "SANDBOX_WORKBENCH_CONFIG_DIR"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv(RUBY_CONTEXTS_ENV, "1")
    app = WorkbenchApp(data_dir=tmp_path / "data", health_interval=0.5)
    notes = Notifications(app, monkeypatch)
    main = app.main_screen

    def ruby_offers_contexts() -> bool:
        return any(runtime.binding == "RUBY" and runtime.contexts for runtime in main.runtimes)

    async with app.run_test(size=(160, 45)) as pilot:
        await until_connected(pilot)
        first = probe(socket_path(private_data_dir(tmp_path / "data").absolute()))
        assert first is not None and first.started_by == os.getpid()
        assert main.status.detail.endswith(f" · daemon pid {first.pid}")
        assert ruby_offers_contexts()
        listed = await asyncio.to_thread(
            run_cli, {**env, RUBY_CONTEXTS_ENV: "0"}, "sandboxes", "list"
        )
        assert "restarted the local daemon" in listed.stderr, listed.stderr
        second = probe(socket_path(private_data_dir(tmp_path / "data").absolute()))
        assert second is not None and second.pid != first.pid
        await wait_for(pilot, lambda: main.status.detail.endswith(f" · daemon pid {second.pid}"))
        await wait_for(pilot, lambda: not ruby_offers_contexts())
        note, _, severity = next(
            call for call in notes.calls if call[1] == "Local daemon restarted"
        )
        assert severity == "warning"
        assert note.startswith(
            f"Another client (pid {second.started_by}) started a new local daemon: "
            f"pid {first.pid} → pid {second.pid}. It has Ruby contexts off (were on)"
        )
        await pilot.pause(1.5)  # health checks go on: nothing restarts it again
        assert len(notes.titled("Local daemon restarted")) == 1
    running = probe(socket_path(private_data_dir(tmp_path / "data").absolute()))
    assert running is not None and running.pid == second.pid


async def test_reopening_the_local_profile_takes_the_daemon_another_client_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA: a workbench started without Ruby contexts, switched to a remote profile and
    back after a command with `--ruby-contexts` restarted the daemon, restarted it again
    with its own settings (Ruby contexts off), saying nothing. Its first open still asks
    for its settings and now says, in a notification, that it restarted the daemon; a
    reopen takes the daemon it finds."""
    env = cli_env(tmp_path)
    for name in ("SANDBOX_WORKBENCH_DATA_DIR", "SANDBOX_WORKBENCH_CONFIG_DIR"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv(RUBY_CONTEXTS_ENV, "0")  # asked for (asking nothing takes any daemon)
    path = socket_path(private_data_dir(tmp_path / "data").absolute())
    extended = await asyncio.to_thread(
        run_cli, {**env, RUBY_CONTEXTS_ENV: "1"}, "sandboxes", "list"
    )
    assert extended.returncode == 0, extended.stderr
    first = probe(path)
    assert first is not None
    app = WorkbenchApp(data_dir=tmp_path / "data", health_interval=0.5)
    notes = Notifications(app, monkeypatch)
    main = app.main_screen
    async with app.run_test(size=(160, 45)) as pilot:
        await until_connected(pilot)
        own = probe(path)
        assert own is not None and own.settings == LocalSettings(ruby_contexts=False)
        assert (
            f"restarted the local daemon (pid {first.pid}) with "
            "Ruby contexts off, File API on (it had Ruby contexts on, File API on)"
        ) in notes.titled("Local daemon restarted")
        notes.calls.clear()
        flagged = await asyncio.to_thread(run_cli, env, "--ruby-contexts", "sandboxes", "list")
        assert "restarted the local daemon" in flagged.stderr, flagged.stderr
        other = probe(path)
        assert other is not None and other.settings == LocalSettings(ruby_contexts=True)
        await wait_for(pilot, lambda: main.status.detail.endswith(f" · daemon pid {other.pid}"))
        main.switch_profile("dev")  # not configured: it fails, as a remote one may
        await wait_for(pilot, lambda: main.status.state == "unreachable")
        main.switch_profile(LOCAL)
        await until_connected(pilot)
        await wait_for(pilot, lambda: main.status.detail.endswith(f" · daemon pid {other.pid}"))
        running = probe(path)
        assert running is not None and (running.pid, running.settings) == (
            other.pid,
            LocalSettings(ruby_contexts=True),
        )
        restarted = notes.titled("Local daemon restarted")
        assert len(restarted) == 1 and "Another client" in restarted[0]  # the CLI's


async def test_a_workbench_asking_no_settings_takes_the_daemon_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA: a workbench started with no flag, variable or `[local]` key restarted a daemon
    that a `--ruby-contexts` command had started, to Ruby contexts off, though it had asked
    for nothing. It now takes that daemon, Ruby contexts and all."""
    env = cli_env(tmp_path)
    for name in ("SANDBOX_WORKBENCH_DATA_DIR", "SANDBOX_WORKBENCH_CONFIG_DIR"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.delenv(RUBY_CONTEXTS_ENV, raising=False)
    path = socket_path(private_data_dir(tmp_path / "data").absolute())
    extended = await asyncio.to_thread(
        run_cli, {**env, RUBY_CONTEXTS_ENV: "1"}, "sandboxes", "list"
    )
    assert extended.returncode == 0, extended.stderr
    first = probe(path)
    assert first is not None and first.settings == LocalSettings(ruby_contexts=True)
    app = WorkbenchApp(data_dir=tmp_path / "data", health_interval=0.5)
    notes = Notifications(app, monkeypatch)
    main = app.main_screen
    async with app.run_test(size=(160, 45)) as pilot:
        await until_connected(pilot)
        await wait_for(pilot, lambda: main.status.detail.endswith(f" · daemon pid {first.pid}"))
        await wait_for(pilot, lambda: "RUBY" in contexts_offered(main.runtimes))
        await pilot.pause(1.2)  # two health checks: nothing restarts it
    running = probe(path)
    assert running is not None and (running.pid, running.settings) == (
        first.pid,
        LocalSettings(ruby_contexts=True),
    )
    assert notes.titled("Local daemon restarted") == []


def contexts_offered(runtimes: list[RuntimeInfo]) -> set[str]:
    """The bindings whose runtimes offer code contexts."""
    return {runtime.binding for runtime in runtimes if runtime.contexts}


async def test_a_daemon_restarted_while_on_another_profile_is_said_on_return(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA: another client restarted the local daemon (other settings) while the workbench
    was on a remote profile; back on the local profile, nothing said so, though new
    contexts and runs now followed other settings."""
    env = cli_env(tmp_path)
    for name in ("SANDBOX_WORKBENCH_DATA_DIR", "SANDBOX_WORKBENCH_CONFIG_DIR"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.delenv(RUBY_CONTEXTS_ENV, raising=False)
    path = socket_path(private_data_dir(tmp_path / "data").absolute())
    app = WorkbenchApp(data_dir=tmp_path / "data", health_interval=0.5)
    notes = Notifications(app, monkeypatch)
    main = app.main_screen
    async with app.run_test(size=(160, 45)) as pilot:
        await until_connected(pilot)
        first = probe(path)
        assert first is not None
        await wait_for(pilot, lambda: main.status.detail.endswith(f" · daemon pid {first.pid}"))
        main.switch_profile("dev")  # not configured: it fails, as a remote one may
        await wait_for(pilot, lambda: main.status.state == "unreachable")
        flagged = await asyncio.to_thread(run_cli, env, "--ruby-contexts", "sandboxes", "list")
        assert "restarted the local daemon" in flagged.stderr, flagged.stderr
        second = probe(path)
        assert second is not None and second.pid != first.pid
        main.switch_profile(LOCAL)
        await until_connected(pilot)
        await wait_for(pilot, lambda: bool(notes.titled("Local daemon restarted")))
        said = notes.titled("Local daemon restarted")[0]
        assert said.startswith(
            f"Another client (pid {second.started_by}) started a new local daemon: "
            f"pid {first.pid} → pid {second.pid}. It has Ruby contexts on (were off)"
        ), said


async def test_a_runtime_dir_open_to_others_is_said_and_f5_opens_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA: with a runtime dir of mode 755 the workbench said "connecting" for ever (the
    refusal ended its worker unsaid); it now says why, and F5 opens the profile again."""
    env = cli_env(tmp_path)
    for name in ("SANDBOX_WORKBENCH_DATA_DIR", "SANDBOX_WORKBENCH_CONFIG_DIR"):
        monkeypatch.setenv(name, env[name])
    runtime = Path(os.environ["SANDBOX_WORKBENCH_RUNTIME_DIR"])
    runtime.mkdir(parents=True, exist_ok=True)
    runtime.chmod(0o755)
    app = WorkbenchApp(data_dir=tmp_path / "data", health_interval=0.5)
    notes = Notifications(app, monkeypatch)
    main = app.main_screen
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: main.status.state == "unreachable", timeout=10)
        message, title, _ = notes.calls[-1]
        assert title == "Cannot open profile local"
        assert f"{runtime} is open to other users (mode 755)" in message, message
        runtime.chmod(0o700)
        await pilot.press("f5")
        await until_connected(pilot)
        assert main.backend is not None
