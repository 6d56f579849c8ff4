"""How the local backend differs from a default deployment, and only when asked to: Ruby
runs statelessly as deployed unless Ruby contexts (a local extension) are on; the File
API can be switched off as a deployment can (issue 24). Settings come from a flag, the
environment or the config's `[local]` table; the data dir's daemon holds one set."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.cli import SCRIPT, cli_env, one_error_line, run_cli
from tests.conftest import require_engine
from tests.daemon import wait_for_a_run
from tests.serve_process import serve_process
from workbench.api import SandboxError
from workbench.backends.daemon import log_path
from workbench.backends.local import open_local_backend
from workbench.config import (
    FILE_API_ENV,
    RUBY_CONTEXTS_ENV,
    AskedLocalSettings,
    Config,
    ConfigError,
    LocalSettings,
    asked_local_settings,
    local_settings,
)

NOT_SUPPORTED = "Code contexts are not supported by binding 'RUBY' (ruby)"


async def test_ruby_runs_statelessly_by_default_as_deployed(
    tmp_path: Path, ruby_engine: None
) -> None:
    backend = open_local_backend(tmp_path / "data", embedded=True, settings=LocalSettings())
    try:
        contexts = {runtime.binding: runtime.contexts for runtime in await backend.runtimes()}
        assert contexts == {"JAVASCRIPT": True, "PYTHON": True, "PERL": True, "RUBY": False}
        sandbox = backend.sandbox("box")
        with pytest.raises(SandboxError) as refused:
            await sandbox.interpreter.create_code_context("RUBY")
        assert (refused.value.http_status, refused.value.message) == (400, NOT_SUPPORTED)
        first = await sandbox.interpreter.run_code("$x = 41", binding="RUBY")
        assert first.error is None and first.context is None  # spec 3.1: a stateless run
        again = await sandbox.interpreter.run_code("$x.inspect", binding="RUBY")
        assert [entry.text for entry in again.results] == ['"nil"']
        assert (await sandbox.get_info()).contexts == []
    finally:
        await backend.aclose()


async def test_ruby_contexts_are_an_extension_that_stays_labelled(
    tmp_path: Path, ruby_engine: None
) -> None:
    data = tmp_path / "data"
    extended = open_local_backend(data, embedded=True, settings=LocalSettings(ruby_contexts=True))
    try:
        sandbox = extended.sandbox("box")
        context = await sandbox.interpreter.create_code_context("RUBY")
        assert context.local_only
        await sandbox.interpreter.run_code("$x = 41", context=context)
        kept = await sandbox.interpreter.run_code("$x + 1", context=context)
        assert [entry.text for entry in kept.results] == ["42"] and kept.context is not None
        await sandbox.interpreter.save_checkpoint(context.id, "kept")
    finally:
        await extended.aclose()
    default = open_local_backend(data, embedded=True, settings=LocalSettings())
    try:
        sandbox = default.sandbox("box")
        [listed] = (await sandbox.get_info()).contexts
        assert listed.id == context.id and listed.local_only
        with pytest.raises(SandboxError) as refused:
            await sandbox.interpreter.run_code("$x", context=context)
        assert refused.value.http_status == 400
        assert refused.value.message.startswith(NOT_SUPPORTED)
        assert "ruby_contexts = true" in refused.value.message
        # What cannot run is not restored, checkpointed or inspected either (QA: they
        # worked, and a restore added to its history); its checkpoints can still go.
        interpreter = sandbox.interpreter
        for change in (
            interpreter.restore_checkpoint(context.id, "kept"),
            interpreter.save_checkpoint(context.id, "again"),
            interpreter.inspect_context(context),
            interpreter.fork_code_context(context.id),
        ):
            with pytest.raises(SandboxError) as refused:
                await change
            assert refused.value.message.startswith(NOT_SUPPORTED), refused.value.message
            assert "--ruby-contexts" in refused.value.message  # the hint too
        assert len(await interpreter.history(context.id)) == 2
        await interpreter.delete_checkpoint(context.id, "kept")
        assert (await interpreter.list_checkpoints(context.id)).checkpoints == []
        stateless = await sandbox.interpreter.run_code("1 + 1", binding="RUBY")
        assert stateless.context is None and [e.text for e in stateless.results] == ["2"]
    finally:
        await default.aclose()


async def test_the_file_api_can_be_off_as_in_a_deployment(
    tmp_path: Path, perl_engine: None
) -> None:
    backend = open_local_backend(
        tmp_path / "data", embedded=True, settings=LocalSettings(file_api=False)
    )
    try:
        sandbox = backend.sandbox("box")
        with pytest.raises(SandboxError) as refused:
            await sandbox.write_file("a.txt", "x")
        assert refused.value.code == "NOT_SUPPORTED"
        info = await sandbox.get_info()
        assert not info.file_api and info.workspace_files == 0
        ran = await sandbox.interpreter.run_code("1 + 1", binding="PERL")
        assert [entry.text for entry in ran.results] == ["2"]
    finally:
        await backend.aclose()


# Each writes a file, lists /workspace, makes a directory and reads a relative path,
# printing what each attempt met, then its cwd.
REFUSED_GUEST_CALLS = {
    "PYTHON": """
import os
def attempt(call):
    try:
        call()
        return "ok"
    except OSError as error:
        return os.strerror(error.errno)
calls = (lambda: open("/workspace/a.txt", "w"), lambda: os.listdir("/workspace"),
         lambda: os.mkdir("/workspace/d"), lambda: open("a.txt"))
print([attempt(call) for call in calls], os.getcwd())
""",
    "JAVASCRIPT": """
const attempt = (call) => { try { call(); return "ok"; } catch (error) { return error.code; } };
console.log(JSON.stringify([
  attempt(() => fs.writeFileSync("/workspace/a.txt", "x")),
  attempt(() => fs.readdirSync("/workspace")),
  attempt(() => fs.mkdirSync("/workspace/d")), fs.existsSync("a.txt"),
  fs.existsSync("/workspace"), process.cwd()]));
""",
    "PERL": """
my @met = (open(my $f, '>', '/workspace/a.txt') ? 'ok' : "$!");
push @met, (opendir(my $d, '/workspace') ? 'ok' : "$!");
push @met, (mkdir('/workspace/d') ? 'ok' : "$!");
push @met, (open(my $g, '<', 'a.txt') ? 'ok' : "$!");
use Cwd; print join('|', @met, getcwd()), "\n";
""",
    "RUBY": """
calls = [-> { File.write("/workspace/a.txt", "x") }, -> { Dir.children("/workspace") },
         -> { Dir.mkdir("/workspace/d") }, -> { File.read("a.txt") }]
met = calls.map { |call| begin; call.call; "ok"; rescue SystemCallError => e; e.class.name; end }
puts (met + [Dir.pwd]).inspect
""",
}
DENIED = "Permission denied"
REFUSED_OUTPUT = {
    "PYTHON": f"{[DENIED] * 4} /workspace",
    "JAVASCRIPT": '["EACCES","EACCES","EACCES",false,false,"/workspace"]',
    "PERL": "|".join([DENIED] * 4 + ["/workspace"]),
    "RUBY": '["Errno::EACCES", "Errno::EACCES", "Errno::EACCES", "Errno::EACCES", "/workspace"]',
}


async def test_with_the_file_api_off_guests_are_refused_their_workspace(
    tmp_path: Path, all_engines: None
) -> None:
    """Spec 6.7: every guest read, write, mkdir and listing under /workspace is EACCES,
    in every language; the sandbox's files stay empty and the cwd stays /workspace."""
    backend = open_local_backend(
        tmp_path / "data",
        embedded=True,
        settings=LocalSettings(file_api=False, ruby_contexts=True),
    )
    try:
        sandbox = backend.sandbox("box")
        for binding, code in REFUSED_GUEST_CALLS.items():
            context = await sandbox.interpreter.create_code_context(binding)
            ran = await sandbox.interpreter.run_code(code, context=context)
            assert ran.error is None, (binding, ran.error)
            assert ran.stdout == [REFUSED_OUTPUT[binding]], binding
        info = await sandbox.get_info()
        assert info.workspace_files == 0
        assert {context.cwd for context in info.contexts} == {"/workspace"}
    finally:
        await backend.aclose()


def test_settings_come_from_the_environment_then_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[local]\nruby_contexts = true\nfile_api = false\nbogus = 1\n")
    config = Config.load(path)
    assert config.local == AskedLocalSettings(ruby_contexts=True, file_api=False)
    assert config.unknown_keys == ["local.bogus"]
    monkeypatch.delenv(RUBY_CONTEXTS_ENV, raising=False)
    monkeypatch.delenv(FILE_API_ENV, raising=False)
    assert local_settings(config) == LocalSettings(ruby_contexts=True, file_api=False)
    # What neither says is not asked (a running daemon keeps it), and is the default here.
    path.write_text("[local]\nfile_api = false\n")
    partial = Config.load(path)
    assert asked_local_settings(partial) == AskedLocalSettings(file_api=False)
    assert local_settings(partial) == LocalSettings(ruby_contexts=False, file_api=False)
    assert asked_local_settings(Config()) == AskedLocalSettings()
    monkeypatch.setenv(RUBY_CONTEXTS_ENV, "1")
    assert asked_local_settings(partial) == AskedLocalSettings(True, False)
    monkeypatch.setenv(RUBY_CONTEXTS_ENV, "0")
    monkeypatch.setenv(FILE_API_ENV, "enabled")
    assert local_settings(config) == LocalSettings()
    monkeypatch.setenv(RUBY_CONTEXTS_ENV, "yes")
    with pytest.raises(ConfigError, match=rf"\${RUBY_CONTEXTS_ENV} must be 1 or 0, not 'yes'"):
        local_settings(config)
    path.write_text('[local]\nfile_api = "no"\n')
    with pytest.raises(ConfigError, match=r"local\.file_api must be a boolean"):
        Config.load(path)


def test_a_flag_restarts_the_daemon_with_its_settings_and_contexts_say_local_only(
    tmp_path: Path, ruby_engine: None
) -> None:
    env = cli_env(tmp_path)
    try:
        plain = run_cli(env, "run", "-s", "box", "-b", "RUBY", "--json", "-c", "$x = 41")
        assert plain.returncode == 0, plain.stderr
        assert "context" not in json.loads(plain.stdout)
        assert plain.stderr == (  # said, as a sandbox's run is otherwise stateful
            "note: ruby has no code contexts here: it ran statelessly, without REPL state or "
            "/workspace (Ruby contexts are a local extension: --ruby-contexts)\n"
        )
        before = json.loads(run_cli(env, "daemon", "status", "--json").stdout)
        assert before["settings"] == {"ruby_contexts": False, "file_api": True}
        extended = run_cli(env, "--ruby-contexts", "run", "-s", "box", "-b", "RUBY", "-c", "$x = 7")
        assert extended.returncode == 0, extended.stderr
        assert extended.stderr == (
            f"note: restarted the local daemon (pid {before['pid']}) with Ruby contexts on, "
            "File API on (it had Ruby contexts off, File API on)\n"
        )
        # Its log says why it stopped (it said "`daemon stop`", which no one had typed).
        logged = log_path(tmp_path / "data").read_text()
        reason = "stopping: restarted by a client asking for Ruby contexts on"
        assert re.search(f"{reason}$", logged, re.MULTILINE), logged
        shown = run_cli(env, "--ruby-contexts", "sandboxes", "info", "box")
        assert shown.returncode == 0 and "(local only)" in shown.stdout, shown.stdout
        kept = run_cli(env, "--ruby-contexts", "run", "-s", "box", "-b", "RUBY", "-c", "$x * 6")
        assert (kept.returncode, kept.stdout, kept.stderr) == (0, "42\n", "")
        # A command that asks nothing takes the daemon as it is (it restarted it, to off).
        plain = run_cli(env, "run", "-s", "box", "-b", "RUBY", "-c", "$x + 1")
        assert (plain.returncode, plain.stdout, plain.stderr) == (0, "8\n", "")
        after = json.loads(run_cli(env, "daemon", "status", "--json").stdout)
        assert after["settings"] == {"ruby_contexts": True, "file_api": True}
        # One that asks for another File API keeps Ruby contexts on, though not the default.
        other = run_cli(env, "--no-file-api", "run", "-s", "box", "-b", "RUBY", "-c", "$x")
        assert (other.returncode, other.stdout) == (0, "7\n"), other.stderr
        assert "with Ruby contexts on, File API off (it had Ruby contexts on, File API on)" in (
            other.stderr
        )
        replaced = json.loads(run_cli(env, "daemon", "status", "--json").stdout)
        assert replaced["settings"] == {"ruby_contexts": True, "file_api": False}
        bad = run_cli({**env, RUBY_CONTEXTS_ENV: "maybe"}, "run", "-b", "RUBY", "-c", "1")
        assert bad.returncode == 2 and RUBY_CONTEXTS_ENV in one_error_line(bad)
    finally:
        run_cli(env, "daemon", "stop")


def test_a_flag_never_replaces_the_daemon_serve_runs(tmp_path: Path, perl_engine: None) -> None:
    """`serve` is the daemon with a TCP listener: a command asking for other settings is
    refused (exit 2) instead of ending the gateway of every remote client."""
    env = cli_env(tmp_path)
    with serve_process(tmp_path / "data", env=env) as served:
        refused = run_cli(env, "--ruby-contexts", "run", "-l", "perl", "-c", "1")
        assert refused.returncode == 2
        line = one_error_line(refused)
        assert "serves remote clients" in line and "stop serve first" in line
        remote = httpx.post(
            f"{served.url}/v1/sandboxes/still-up/execute",
            json={"code": "6 * 7", "binding": "PERL"},
            headers={"Authorization": f"Bearer {served.token}"},
            timeout=60,
        )
        assert remote.status_code == 200 and remote.json()["results"] == [{"text": "42"}]
        same = run_cli(env, "run", "-l", "perl", "-c", "2")  # the same settings: served
        assert (same.returncode, same.stdout) == (0, "2\n")


RUBY_TRANSCRIPT = {
    "format": "sandbox-workbench-transcript",
    "version": 1,
    "context": {"binding": "RUBY", "language": "ruby", "cwd": "/workspace", "envVars": {}},
    "cells": [
        {"code": "$x = 41", "outcome": {"results": [{"text": "41"}]}},
        {"code": "$x + 1", "outcome": {"results": [{"text": "42"}]}},
    ],
}


def test_replaying_a_ruby_context_where_ruby_is_stateless_is_a_known_difference(
    tmp_path: Path, ruby_engine: None
) -> None:
    env = cli_env(tmp_path)
    transcript = tmp_path / "ruby.json"
    transcript.write_text(json.dumps(RUBY_TRANSCRIPT))
    skipped = run_cli(env, "--no-daemon", "replay", str(transcript))
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stderr == (
        "note: known difference: the transcript ran in a ruby code context, and local runs "
        "RUBY statelessly (ruby contexts are a local extension); not replayed\n"
    )
    report = json.loads(run_cli(env, "--no-daemon", "replay", str(transcript), "--json").stdout)
    assert report["same"] and report["cells"] == [] and report["knownDifference"]
    replayed = run_cli(env, "--no-daemon", "--ruby-contexts", "replay", str(transcript))
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.endswith("all 2 cells agree on local\n")


def test_other_settings_never_replace_a_daemon_while_it_runs_code(
    tmp_path: Path, ruby_engine: None
) -> None:
    """Replacing the daemon for a flag would cancel another client's run, which would get
    only "Execution cancelled": the command is refused instead, and the run ends well."""
    require_engine("python")
    env = cli_env(tmp_path)
    try:
        running = subprocess.Popen(
            [
                str(SCRIPT),
                "run",
                "-s",
                "long",
                "-l",
                "python",
                "-c",
                "import time\ntime.sleep(3)\n7",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        wait_for_a_run(env)
        pid = json.loads(run_cli(env, "daemon", "status", "--json").stdout)["pid"]
        refused = run_cli(env, "--ruby-contexts", "run", "-l", "ruby", "-c", "1")
        assert refused.returncode == 2
        assert one_error_line(refused) == (
            f"error: the local daemon (pid {pid}) holds Ruby contexts off, File API on and is "
            "running 1 execution for other clients; this command asks for Ruby contexts "
            "on: try again when they end, use the same settings, or stop it with "
            "`sandbox-workbench daemon stop`"
        )
        stdout, stderr = running.communicate(timeout=60)
        assert (running.returncode, stdout, stderr) == (0, "7\n", "")
        # Once nothing runs, the flag restarts it as before.
        restarted = run_cli(env, "--ruby-contexts", "run", "-l", "ruby", "-c", "1")
        assert restarted.returncode == 0 and "restarted the local daemon" in restarted.stderr
    finally:
        run_cli(env, "daemon", "stop")


def test_a_context_its_binding_no_longer_offers_is_not_reset(
    tmp_path: Path, ruby_engine: None
) -> None:
    """`contexts reset` of a Ruby context made while Ruby contexts were on deleted it,
    with its history and checkpoints, then failed to make the new one (found in review):
    it is refused before anything goes."""
    env = {**cli_env(tmp_path), "SANDBOX_WORKBENCH_NO_DAEMON": "1"}
    made = run_cli(env, "--ruby-contexts", "contexts", "create", "-s", "box", "-l", "ruby")
    assert made.returncode == 0, made.stderr
    context_id = made.stdout.strip()
    reset = run_cli(env, "contexts", "reset", "-s", "box", "--context", context_id, "-y")
    assert reset.returncode == 2, reset.stderr
    assert "offers no RUBY code contexts now" in one_error_line(reset)
    listed = run_cli(env, "contexts", "list", "-s", "box")
    assert context_id in listed.stdout, listed.stderr
