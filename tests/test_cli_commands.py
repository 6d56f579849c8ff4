"""The headless commands end to end, in subprocesses, on the local backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_fork_server import run_cli_forked
from tests.conftest import require_engine
from tests.serve_process import serve_process
from tests.test_context_restart import corrupt_snapshots


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data"),
        "SANDBOX_WORKBENCH_CONFIG_DIR": str(tmp_path / "config"),
    }


def cli(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_cli_forked(env, *args, stdin=stdin, module=True)


def test_run_stateless_and_stateful_with_exit_codes(env: dict[str, str]) -> None:
    require_engine("perl")
    ok = cli(env, "run", "-l", "perl", "-c", 'print "hi\\n"; 6*7')
    assert (ok.returncode, ok.stdout) == (0, "hi\n42\n")
    failed = cli(env, "run", "-b", "PERL", "-c", 'die "boom\\n"')
    assert failed.returncode == 1
    assert "PerlError: boom" in failed.stderr
    usage = cli(env, "run", "--context", "x", "-c", "1")
    assert usage.returncode == 2
    assert "--context needs --sandbox" in usage.stderr
    invalid = cli(env, "run", "-b", "PERL", "-c", "   ")
    assert invalid.returncode == 2
    assert "Non-empty code is required" in invalid.stderr
    assert cli(env, "run", "-s", "demo", "-l", "perl", "-c", "our $n = 20").returncode == 0
    again = cli(env, "run", "-s", "demo", "-l", "perl", "--json", "-c", "$n * 2 + 2")
    result = json.loads(again.stdout)
    assert result["results"] == [{"text": "42"}]
    assert result["executionCount"] == 2
    assert result["workbench"]["boot"] == "resident"  # the daemon kept the context live
    assert cli(env, "daemon", "stop").returncode == 0
    restarted = json.loads(cli(env, "run", "-s", "demo", "-l", "perl", "--json", "-c", "$n").stdout)
    assert restarted["results"] == [{"text": "20"}]
    assert restarted["workbench"]["boot"] == "restored"


def test_run_reads_code_from_stdin_and_files(env: dict[str, str], tmp_path: Path) -> None:
    require_engine("python")
    script = tmp_path / "script.py"
    script.write_text("x = 20\nx * 2 + 2\n")
    assert cli(env, "run", "-l", "python", str(script)).stdout == "42\n"
    assert cli(env, "run", "-l", "python", "-", stdin="'from stdin'").stdout == "'from stdin'\n"


def test_python_state_survives_invocations_and_a_lost_state_is_reported(
    env: dict[str, str],
) -> None:
    require_engine("python")
    assert cli(env, "run", "-s", "py", "-l", "python", "-c", "x = 41").returncode == 0
    second = cli(env, "run", "-s", "py", "-l", "python", "-c", "x + 1")
    assert (second.returncode, second.stdout) == (0, "42\n")
    assert "warning:" not in second.stderr
    failed = cli(env, "run", "-s", "py", "-l", "python", "-c", "def f():\n    return x / 0\nf()")
    assert failed.returncode == 1
    assert failed.stderr.splitlines() == [  # the error once, then its frames
        "ZeroDivisionError: division by zero",
        '  File "<sandbox>", line 3, in <module>',
        '  File "<sandbox>", line 2, in f',
    ]
    assert cli(env, "daemon", "stop").returncode == 0  # only a restart reads the snapshot
    corrupt_snapshots(Path(env["SANDBOX_WORKBENCH_DATA_DIR"]), "host")
    third = cli(env, "run", "-s", "py", "-l", "python", "-c", "2")
    assert third.returncode == 0
    assert "warning:" in third.stderr
    assert "snapshot" in third.stderr


def test_sandboxes_and_files(env: dict[str, str], tmp_path: Path) -> None:
    local = tmp_path / "notes.bin"
    local.write_bytes(bytes(range(256)))
    assert cli(env, "files", "put", "box", str(local)).returncode == 0
    assert cli(env, "files", "mkdir", "box", "deep/er", "--parents").returncode == 0
    listing = cli(env, "files", "ls", "box", "-r")
    # By path, a directory before what it holds (the backend lists in the order made).
    names = [line.split()[-1] for line in listing.stdout.splitlines()]
    assert names == ["deep/", "deep/er/", "notes.bin"], listing.stdout
    cat = subprocess.run(
        [sys.executable, "-m", "workbench", "files", "cat", "box", "notes.bin"],
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert cat.stdout == bytes(range(256))
    missing = cli(env, "files", "cat", "box", "nope")
    assert missing.returncode == 4
    assert "No such file" in missing.stderr
    assert "box" in cli(env, "sandboxes", "list").stdout
    info = json.loads(cli(env, "sandboxes", "info", "box", "--json").stdout)
    assert info["workspace"] == {"files": 3, "bytes": 256}
    assert cli(env, "files", "rm", "box", "deep", "-r").returncode == 0
    assert cli(env, "sandboxes", "destroy", "box", "--yes").returncode == 0
    assert cli(env, "sandboxes", "list").stdout == "no sandboxes\n"
    bad = cli(env, "sandboxes", "info", "--", "-bad-")
    assert bad.returncode == 2
    assert "cannot start or end with a hyphen" in bad.stderr


def test_profiles_never_print_tokens(env: dict[str, str], tmp_path: Path) -> None:
    added = cli(
        env, "profiles", "add", "staging", "--url", "https://gw.example", "--token-env", "TOK"
    )
    assert added.returncode == 0
    shown = json.loads(cli(env, "profiles", "show", "staging").stdout)
    assert shown == {
        "name": "staging",
        "kind": "remote",
        "url": "https://gw.example",
        "token": "environment variable TOK",
    }
    stored = cli(
        env,
        "profiles",
        "add",
        "plain",
        "--url",
        "https://x.example",
        "--insecure-store-token",
        stdin="s3cret-token\n",
    )
    assert stored.returncode == 0
    listing = cli(env, "profiles", "list").stdout
    assert "s3cret-token" not in listing
    assert "plain" in listing and "staging" in listing
    config = (tmp_path / "config" / "config.toml").read_text()
    assert "TOK" in config
    assert oct((tmp_path / "config" / "config.toml").stat().st_mode & 0o777) == "0o600"
    unset = cli(env, "sandboxes", "list", "--profile", "staging")
    assert unset.returncode == 2
    assert "$TOK" in unset.stderr
    assert cli(env, "profiles", "remove", "staging").returncode == 0
    unknown = cli(env, "sandboxes", "list", "--profile", "staging")
    assert unknown.returncode == 2
    assert "unknown profile 'staging'" in unknown.stderr


def test_run_through_a_served_profile(env: dict[str, str], tmp_path: Path) -> None:
    require_engine("perl")
    with serve_process(tmp_path / "served") as server:
        env = {**env, "DEV_TOKEN": server.token}
        assert (
            cli(
                env, "profiles", "add", "dev", "--url", server.url, "--token-env", "DEV_TOKEN"
            ).returncode
            == 0
        )
        assert (
            cli(
                env, "run", "-p", "dev", "-s", "shared", "-l", "perl", "-c", "our $v = 41"
            ).returncode
            == 0
        )
        shared = cli(
            env, "run", "-p", "dev", "-s", "shared", "-l", "perl", "--json", "-c", "$v + 1"
        )
        result = json.loads(shared.stdout)
        assert result["results"] == [{"text": "42"}]
        assert result["workbench"]["boot"] == "resident"  # the live context in `serve`
        wrong = cli({**env, "DEV_TOKEN": "nope"}, "sandboxes", "list", "-p", "dev")
        assert wrong.returncode == 3
        assert "Missing or invalid bearer token" in wrong.stderr


def test_serve_refuses_non_loopback(env: dict[str, str]) -> None:
    refused = cli(env, "serve", "--host", "0.0.0.0", "--port", "0")
    assert refused.returncode == 2
    assert "not a loopback address" in refused.stderr


def test_gateway_init_renders_and_adds_a_profile(env: dict[str, str], tmp_path: Path) -> None:
    target = tmp_path / "deploy"
    made = cli(
        env,
        "gateway",
        "init",
        str(target),
        "--bindings",
        "python,perl",
        "--url",
        "https://gw.example.workers.dev",
    )
    assert made.returncode == 0, made.stderr
    dev_vars = target / "gateway" / ".dev.vars"
    token = dev_vars.read_text().strip().split("=", 1)[1]
    assert len(token) >= 40
    assert oct(dev_vars.stat().st_mode & 0o777) == "0o600"
    assert token not in made.stdout + made.stderr
    wrangler = (target / "gateway" / "wrangler.jsonc").read_text()
    assert '"PYTHON"' in wrangler and '"PERL"' in wrangler and '"RUBY"' not in wrangler
    assert sorted(p.name for p in (target / "runtime").iterdir()) == ["perl", "python"]
    assert "gateway" in cli(env, "profiles", "list").stdout
    again = cli(env, "gateway", "init", str(target), "--profile", "other")
    assert again.returncode == 1
    assert "Refusing to overwrite" in again.stderr


def test_gateway_init_writes_nothing_where_a_token_file_is_in_the_way(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A `.dev.vars` already there was found after every template was written: a half
    render that `--force` could not finish (QA). Nothing is written then; and the steps
    name the token file by a path that holds after their `cd`."""
    target = tmp_path / "deploy"
    (target / "gateway").mkdir(parents=True)
    (target / "gateway" / ".dev.vars").write_text("WORKBENCH_TOKEN=old\n")
    refused = cli(env, "gateway", "init", str(target), "--bindings", "python")
    assert refused.returncode == 1 and "Refusing to overwrite" in refused.stderr
    assert [path.name for path in target.rglob("*")] == ["gateway", ".dev.vars"]
    made = run_cli_forked(
        env, "gateway", "init", "rel ative", "--bindings", "python", module=True, cwd=tmp_path
    )
    assert made.returncode == 0, made.stderr
    absolute = tmp_path / "rel ative" / "gateway"  # quoted: a space broke them (review)
    assert f"cd '{absolute}' &&" in made.stdout
    assert f"grep WORKBENCH_TOKEN '{absolute / '.dev.vars'}' |" in made.stdout
    assert f"{tmp_path / 'rel ative' / 'runtime' / 'python'}/ (Worker" in made.stdout


def test_gateway_init_flags_it_cannot_use_are_usage_errors(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Exit 2, as for every other flag the workbench refuses (they were exit 1)."""
    for flags, expected in [
        (("--bindings", "COBOL"), "Unknown runtime binding 'COBOL'"),
        (("--bindings", "PYTHON,PYTHON"), "Duplicate runtime binding 'PYTHON'"),
        (("--bindings", ""), "Choose at least one runtime binding"),
        (("--name-prefix", "bad prefix!"), "Invalid Worker name"),
        # No flag allows it here: the hint named one it does not take (QA).
        (("--url", "http://192.168.1.9:8787"), "token in clear text; use https://\n"),
    ]:
        refused = cli(env, "gateway", "init", str(tmp_path / "deploy"), *flags)
        assert refused.returncode == 2, (flags, refused.stderr)
        assert expected in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "deploy").exists()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")  # a raw errno said so (QA)
    for target in ("dangling", "dangling/sub"):  # or a directory under one (review)
        refused = cli(env, "gateway", "init", str(tmp_path / target))
        assert refused.returncode == 2 and "is a symlink to nothing" in refused.stderr


def test_gateway_init_never_replaces_a_profile_silently(
    env: dict[str, str], tmp_path: Path
) -> None:
    """An existing profile keeps its URL and token source (and the keyring its token)
    unless `--force` says to replace them; without --url and a keyring, nothing of it is
    touched, and the render goes on (it was refused; QA)."""
    added = cli(env, "profiles", "add", "staging", "--url", "https://a.example", "--token-env", "T")
    assert added.returncode == 0, added.stderr
    keyring = {
        **env,
        "PYTHON_KEYRING_BACKEND": "tests.cli.FileKeyring",
        "TEST_KEYRING_FILE": str(tmp_path / "keyring.json"),
    }
    no_keyring = {**env, "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}
    for url, where in ((None, keyring), ("https://b.example", no_keyring)):
        args = ["gateway", "init", str(tmp_path / "d1"), "--profile", "staging"]
        refused = cli(where, *args, *(["--url", url] if url else []))
        assert refused.returncode == 2
        assert "profile 'staging' exists (use --force" in refused.stderr
        assert not (tmp_path / "d1").exists()  # nothing rendered either
    rendered = cli(no_keyring, "gateway", "init", str(tmp_path / "d0"), "--profile", "staging")
    assert rendered.returncode == 0, rendered.stderr
    assert (tmp_path / "d0").is_dir()
    assert "profiles add staging --url <the deployed URL> --token-env " in rendered.stdout
    assert " --force\n" in rendered.stdout  # the step replaces the kept profile
    listed = cli(env, "profiles", "list").stdout
    assert "staging\thttps://a.example\ttoken: environment variable T" in listed
    forced = cli(
        env,
        "gateway",
        "init",
        str(tmp_path / "d2"),
        "--profile",
        "staging",
        "--url",
        "https://b.example",
        "--force",
    )
    assert forced.returncode == 0, forced.stderr
    assert "staging\thttps://b.example" in cli(env, "profiles", "list").stdout


def test_locate_and_engines_list(env: dict[str, str], tmp_path: Path) -> None:
    places = json.loads(cli(env, "locate", "--json").stdout)
    assert places["data"] == str(tmp_path / "data")
    assert places["config"] == str(tmp_path / "config" / "config.toml")
    socket = Path(places["socket"])
    assert socket.parent == Path(env["SANDBOX_WORKBENCH_RUNTIME_DIR"])
    assert socket.name.endswith(".sock") and Path(places["log"]).stem == socket.stem
    assert not socket.exists()  # locating starts no daemon
    engines = json.loads(cli(env, "engines", "list", "--json").stdout)
    assert [row["language"] for row in engines] == ["javascript", "python", "perl", "ruby"]
    assert all(row["state"] in {"ready", "not prepared", "cannot prepare"} for row in engines)
    # Piped, one whole line per engine (not wrapped at 80 columns), without trailing spaces.
    lines = cli(env, "engines", "list").stdout.splitlines()
    assert lines[0].split() == ["language", "engine", "version", "state"]
    assert [line.split()[0] for line in lines[1:]] == ["javascript", "python", "perl", "ruby"]
    assert all(line == line.rstrip() for line in lines)
    assert lines[1].rsplit("  ", 1)[1].strip() == engines[0]["state"]
