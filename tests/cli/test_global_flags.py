"""Flags given before the subcommand are honoured or refused, never silently ignored."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.cli import cli_env, one_error_line, run_cli


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_group_profile_reaches_destroy_and_it_names_the_backend(tmp_path: Path) -> None:
    env = cli_env(tmp_path, STAGING_TOKEN="t" * 20)
    assert run_cli(env, "files", "put", "X", "-", "/workspace/keep", stdin="data").returncode == 0
    url = f"http://127.0.0.1:{closed_port()}"
    added = run_cli(env, "profiles", "add", "staging", "--url", url, "--token-env", "STAGING_TOKEN")
    assert added.returncode == 0, added.stderr

    destroyed = run_cli(env, "-p", "staging", "sandboxes", "destroy", "X", "-y")

    assert destroyed.returncode == 3  # staging is down: nothing was destroyed anywhere
    assert destroyed.stderr.splitlines()[0] == (f"destroying sandbox X on profile staging ({url})")
    assert "connection refused" in one_error_line(destroyed)
    assert run_cli(env, "sandboxes", "list").stdout.startswith("X\t")  # the local X is intact


def test_group_data_dir_reaches_every_command(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    other = tmp_path / "other-store"
    put = run_cli(env, "--data-dir", str(other), "files", "put", "box", "-", "a.txt", stdin="1")
    assert put.returncode == 0, put.stderr
    assert run_cli(env, "--data-dir", str(other), "sandboxes", "list").stdout.startswith("box\t")
    assert run_cli(env, "sandboxes", "list").stdout == "no sandboxes\n"
    located = run_cli(env, "--data-dir", str(other), "locate", "--json")
    assert f'"data": "{other}"' in located.stdout
    removed = run_cli(env, "--data-dir", str(other), "files", "rm", "box", "a.txt")
    assert removed.returncode == 0
    assert removed.stderr == f"asking to delete a.txt in sandbox box on local ({other})\n"


def test_the_same_value_twice_is_fine_different_values_are_a_usage_error(
    tmp_path: Path,
) -> None:
    env = cli_env(tmp_path)
    store = str(tmp_path / "data")
    same = run_cli(env, "-p", "local", "--data-dir", store, "sandboxes", "list", "-p", "local")
    assert (same.returncode, same.stdout) == (0, "no sandboxes\n")
    conflicts = [
        ("-p", "local", "sandboxes", "list", "-p", "staging"),
        ("--data-dir", store, "sandboxes", "list", "--data-dir", str(tmp_path / "elsewhere")),
        ("--data-dir", store, "locate", "--data-dir", str(tmp_path / "elsewhere")),
    ]
    for args in conflicts:
        refused = run_cli(env, *args)
        assert refused.returncode == 2
        assert "is given twice with different values" in refused.stderr
        assert "Traceback" not in refused.stderr
    # $SANDBOX_WORKBENCH_PROFILE is a default: either flag overrides it without conflict.
    env["SANDBOX_WORKBENCH_PROFILE"] = "nowhere"
    assert "unknown profile 'nowhere'" in one_error_line(run_cli(env, "sandboxes", "list"))
    assert run_cli(env, "-p", "local", "sandboxes", "list").returncode == 0
    assert run_cli(env, "sandboxes", "list", "-p", "local").returncode == 0


def test_group_flags_a_command_does_not_use_are_refused(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    for args, flag in (
        (("-p", "staging", "profiles", "list"), "--profile"),
        (("-p", "staging", "engines", "list"), "--profile"),
        (("--data-dir", "/tmp", "engines", "list"), "--data-dir"),
        (("-p", "staging", "serve"), "--profile"),
        (("-p", "staging", "gateway", "init", str(tmp_path / "g")), "--profile"),
    ):
        refused = run_cli(env, *args)
        assert refused.returncode == 2
        assert f"Error: {flag} does not apply to `{args[2]}`" in refused.stderr
    assert not (tmp_path / "g").exists()
