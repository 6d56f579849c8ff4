"""The config file: unknown keys are noted, writes keep the user's comments and unknown
tables, plain http:// only to loopback, and removing a profile removes its keyring token."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli import cli_env, one_error_line, run_cli

USER_CONFIG = """\
# My workbench settings.
[profiles.staging]   # the shared one
url = "https://staging.example"  # behind the VPN
token_env = "STAGING_TOKEN"

[plugins.spellcheck]  # not the workbench's, but mine
enabled = true
words = ["wasm", "zeroperl"]

[ui]
theme = "gruvbox"   # dark
font = "iosevka"
"""


def config_path(tmp_path: Path) -> Path:
    return tmp_path / "config" / "config.toml"


def test_profiles_add_and_remove_change_only_their_table(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    path = config_path(tmp_path)
    path.parent.mkdir()
    path.write_text(USER_CONFIG)

    added = run_cli(env, "profiles", "add", "dev", "--url", "http://127.0.0.1:8787",
                    "--token-env", "DEV_TOKEN")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert added.stderr == (
        f"note: {path}: unknown keys ignored: plugins, ui.font\n"  # one line, on stderr
    )
    new_table = '[profiles.dev]\nurl = "http://127.0.0.1:8787"\ntoken_env = "DEV_TOKEN"\n\n'
    before, after = USER_CONFIG.split("[plugins.spellcheck]")
    assert path.read_text() == f"{before}{new_table}[plugins.spellcheck]{after}"

    assert run_cli(env, "profiles", "remove", "dev").returncode == 0
    assert path.read_text() == USER_CONFIG
    assert run_cli(env, "-q", "profiles", "list").stderr == ""  # --quiet: no notes


def test_profiles_list_json_and_unknown_keys(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    config_path(tmp_path).parent.mkdir()
    config_path(tmp_path).write_text(USER_CONFIG)
    listed = run_cli(env, "profiles", "list", "--json")
    assert json.loads(listed.stdout) == [
        {"name": "local", "kind": "local"},
        {
            "name": "staging",
            "kind": "remote",
            "url": "https://staging.example",
            "token": "environment variable STAGING_TOKEN",
        },
    ]
    # A misspelt key is named where it matters.
    path = config_path(tmp_path)
    path.write_text('[profiles.typo]\nurl = "https://t.example"\ntoken_evn = "TOKEN"\n')
    used = run_cli(env, "sandboxes", "list", "-p", "typo")
    assert used.returncode == 2
    assert one_error_line(used) == (
        f"error: profile 'typo' has no token source (unknown keys in {path}: "
        "profiles.typo.token_evn)"
    )


def test_plain_http_is_for_loopback_unless_allowed(tmp_path: Path) -> None:
    env = cli_env(tmp_path, TOKEN="t" * 20)
    add = ("profiles", "add", "lan", "--token-env", "TOKEN", "--url")
    refused = run_cli(env, *add, "http://192.0.2.7:8787")
    assert refused.returncode == 2
    assert "would send the token in clear text" in refused.stderr
    assert not config_path(tmp_path).exists()
    for loopback in ("http://127.0.0.1:8787", "http://localhost:8787", "http://[::1]:8787"):
        assert run_cli(env, *add, loopback, "--force").returncode == 0
    allowed = run_cli(env, *add, "http://192.0.2.7:8787", "--force", "--allow-insecure")
    assert allowed.returncode == 0, allowed.stderr
    assert "allow_insecure = true" in config_path(tmp_path).read_text()
    # A hand-edited file gets the same check when the profile is used.
    text = config_path(tmp_path).read_text().replace("allow_insecure = true\n", "")
    config_path(tmp_path).write_text(text)
    used = run_cli(env, "sandboxes", "list", "-p", "lan")
    assert used.returncode == 2
    assert "would send the token in clear text" in used.stderr


def test_a_malformed_url_is_a_usage_error_wherever_it_is_given(tmp_path: Path) -> None:
    """An unclosed IPv6 bracket or a port out of range or not a number: exit 2 naming the
    URL, from `profiles add`, `gateway init` and the config file alike (each ended in
    "unexpected ValueError", or was stored and failed at first use)."""
    env = cli_env(tmp_path, TOKEN="t" * 20)
    for url in ("https://[::1", "https://127.0.0.1:99999", "https://127.0.0.1:abc"):
        added = run_cli(env, "profiles", "add", "bad", "--token-env", "TOKEN", "--url", url)
        assert added.returncode == 2 and "is not a valid URL" in added.stderr, url
        assert not config_path(tmp_path).exists()
        rendered = run_cli(env, "gateway", "init", str(tmp_path / "gw"), "--url", url)
        assert rendered.returncode == 2 and "is not a valid URL" in rendered.stderr, url
    config_path(tmp_path).parent.mkdir(parents=True, exist_ok=True)
    config_path(tmp_path).write_text('[profiles.v6]\nurl = "https://[::1"\ntoken_env = "TOKEN"\n')
    used = run_cli(env, "sandboxes", "list", "-p", "v6")
    assert used.returncode == 2 and "is not a valid URL" in one_error_line(used)


def test_a_profile_name_or_token_variable_that_cannot_work_is_refused(tmp_path: Path) -> None:
    """A newline in a name broke `profiles list` and the error lines naming profiles; a
    token variable with a space or '=' can never be set."""
    env = cli_env(tmp_path, TOKEN="t" * 20)
    url = "https://gw.example.test"
    for name, token_env, expected in [
        ("two\nlines", "TOKEN", "cannot name a profile"),
        ("../x", "TOKEN", "cannot name a profile"),
        ('q"uote', "TOKEN", "cannot name a profile"),
        ("local", "TOKEN", "`local` is built in"),
        ("ok", "a b=c", "is not an environment variable's name"),
    ]:
        refused = run_cli(env, "profiles", "add", name, "--url", url, "--token-env", token_env)
        assert refused.returncode == 2 and expected in refused.stderr, (name, refused.stderr)
        assert not config_path(tmp_path).exists()
    rendered = run_cli(env, "gateway", "init", str(tmp_path / "gw"), "--profile", "a b")
    assert rendered.returncode == 2 and "cannot name a profile" in rendered.stderr
    added = run_cli(env, "profiles", "add", "staging-2.eu_1", "--url", url, "--token-env", "TOKEN")
    assert added.returncode == 0, added.stderr


def test_removing_a_profile_deletes_its_keyring_token(tmp_path: Path) -> None:
    keyring_file = tmp_path / "keyring.json"
    env = cli_env(
        tmp_path,
        PYTHON_KEYRING_BACKEND="tests.cli.FileKeyring",
        TEST_KEYRING_FILE=str(keyring_file),
    )
    added = run_cli(
        env, "profiles", "add", "prod", "--url", "https://gw.example", "--keyring",
        "--token-stdin", stdin="prod-secret-token\n",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert json.loads(keyring_file.read_text()) == {"sandbox-workbench/prod": "prod-secret-token"}
    assert "prod-secret-token" not in config_path(tmp_path).read_text()

    removed = run_cli(env, "profiles", "remove", "prod")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(keyring_file.read_text()) == {}
    assert "deleted its token from the OS keyring" in removed.stderr
