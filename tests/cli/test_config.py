"""The config file: unknown keys are noted, writes keep the user's comments and unknown
tables whatever the TOML layout, concurrent writes all land, plain http:// only to
loopback, and removing a profile removes its keyring token. A file that is not a small
regular file is refused, and errors never quote a token."""

from __future__ import annotations

import json
import os
import pty
import select
import stat
import subprocess
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import workbench.config as config_module
from tests.cli import SCRIPT, cli_env, one_error_line, run_cli
from tests.cli.test_errors import write_config
from workbench.config import Config, ConfigError, RemoteProfile

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


URL = "https://new.example"


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


def test_a_config_saved_with_a_byte_order_mark_is_read_and_updated(tmp_path: Path) -> None:
    """Notepad starts a UTF-8 file with a byte order mark, which TOML refuses: the config
    was "Invalid statement (at line 1, column 1)"."""
    path = config_path(tmp_path)
    path.parent.mkdir()
    path.write_bytes(b"\xef\xbb\xbf" + USER_CONFIG.encode())
    config = Config.load(path)
    assert list(config.profiles) == ["staging"]
    config.profiles["dev"] = RemoteProfile("dev", URL, token_env="DEV_TOKEN")
    config.save()
    assert list(Config.load(path).profiles) == ["staging", "dev"]
    assert path.read_text().startswith(USER_CONFIG.split("[plugins")[0])  # the rest kept


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


def test_a_url_with_credentials_or_spaces_is_refused(tmp_path: Path) -> None:
    """`https://user:SECRETPASS@host` was stored and shown whole by `profiles list` and in
    every error naming the gateway; ` https://…` was stored as typed."""
    env = cli_env(tmp_path, TOKEN="t" * 20)
    for url, expected in [
        ("https://user:SECRETPASS@gw.example", "the URL holds credentials (user:password@)"),
        (" https://gw.example", "' https://gw.example' has a space or a line end in it"),
        ("https://gw.exa mple", "'https://gw.exa mple' has a space or a line end in it"),
        # Every request's route goes on the URL's path: these broke them all (QA).
        ("https://gw.example/?a=b", "has a query or a fragment; give the gateway's base URL"),
        ("https://gw.example/#frag", "has a query or a fragment; give the gateway's base URL"),
        ("https://gw.example/?", "has a query or a fragment; give the gateway's base URL"),
    ]:
        added = run_cli(env, "profiles", "add", "bad", "--token-env", "TOKEN", "--url", url)
        assert added.returncode == 2 and expected in added.stderr, added.stderr
        assert "SECRETPASS" not in added.stderr
        assert not config_path(tmp_path).exists()
    # One an older version stored is listed masked, and refused when used.
    write_config(
        tmp_path,
        '[profiles.old]\nurl = "https://user:SECRETPASS@gw.example/v"\ntoken_env = "TOKEN"\n',
    )
    listed = run_cli(env, "profiles", "list")
    assert "old\thttps://***@gw.example/v\t" in listed.stdout
    as_json = run_cli(env, "profiles", "list", "--json")
    used = run_cli(env, "sandboxes", "list", "-p", "old")
    assert used.returncode == 2 and "the URL holds credentials" in one_error_line(used)
    for output in (listed, as_json, used):
        assert "SECRETPASS" not in output.stdout + output.stderr


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


def test_a_config_that_is_not_a_small_regular_file_is_refused_at_once(tmp_path: Path) -> None:
    """A FIFO made every command wait for a writer forever, and a link to /dev/zero read
    until memory ran out: each is now an error naming the file, and the local profile goes
    on with a warning."""
    env = cli_env(tmp_path)
    path = write_config(tmp_path, "# " + "x" * (1 << 20) + "\n")
    assert one_error_line(run_cli(env, "profiles", "list", timeout=30)) == (
        f"error: cannot read {path}: it is larger than the limit of 1 MiB"
    )
    path.unlink()
    path.symlink_to("/dev/zero")
    listed = run_cli(env, "profiles", "list", timeout=30)
    assert listed.returncode == 2
    assert one_error_line(listed) == f"error: cannot read {path}: it is not a regular file"
    path.unlink()
    os.mkfifo(path)
    for args in (("profiles", "list"), ("profiles", "add", "p", "--url", URL, "--token-env", "T")):
        refused = run_cli(env, *args, timeout=30)
        assert refused.returncode == 2
        assert one_error_line(refused) == f"error: cannot read {path}: it is not a regular file"
    local = run_cli(env, "--no-daemon", "sandboxes", "list", timeout=30)
    assert local.returncode == 0, local.stderr
    assert local.stderr == (
        f"warning: cannot read {path}: it is not a regular file (the local profile goes on "
        "without it)\n"
    )


def test_a_lock_file_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path) -> None:
    """A FIFO planted where the save's lock goes made `profiles add` wait for ever (found
    by a review)."""
    env = cli_env(tmp_path)
    path = write_config(tmp_path, USER_CONFIG)
    os.mkfifo(path.with_name("config.toml.lock"))
    added = run_cli(env, "profiles", "add", "p", "--url", URL, "--token-env", "T", timeout=30)
    assert added.returncode == 2
    assert one_error_line(added) == (
        f"error: cannot write the config: {path}.lock is not a regular file"
    )
    assert path.read_text() == USER_CONFIG


def test_saving_reads_the_file_again_within_the_same_bounds(tmp_path: Path) -> None:
    """`save` reads the file as it is then: one grown past the limit meanwhile, or made a
    FIFO, is an error, and stays as it was."""
    path = config_path(tmp_path)
    config = Config.load(path)
    config.profiles["p"] = RemoteProfile("p", URL, token_env="T")
    large = "# " + "x" * (1 << 20) + "\n"
    write_config(tmp_path, large)
    with pytest.raises(ConfigError, match="larger than the limit of 1 MiB"):
        config.save()
    assert path.read_text() == large
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(ConfigError, match="it is not a regular file"):
        config.save()
    assert stat.S_ISFIFO(path.lstat().st_mode)


def test_an_error_about_a_value_never_shows_a_token_and_is_short(tmp_path: Path) -> None:
    """A token of the wrong type was quoted in the error of every command, and a value of
    50 MB was quoted whole."""
    env = cli_env(tmp_path)
    path = write_config(
        tmp_path, '[profiles.foo]\nurl = "https://h.example"\ntoken = ["SECRET123TOKEN"]\n'
    )
    expected = f"{path}: profiles.foo.token must be a string, not an array; fix or remove it"
    listed = run_cli(env, "profiles", "list")
    assert one_error_line(listed) == f"error: {expected}"
    local = run_cli(env, "--no-daemon", "sandboxes", "list")
    assert local.stderr == f"warning: {expected} (the local profile goes on without it)\n"
    write_config(tmp_path, '[profiles.foo]\nurl = "https://h.example"\ntoken_keyring = "SECRET"\n')
    assert "SECRET" not in one_error_line(run_cli(env, "profiles", "list"))
    write_config(tmp_path, f'[local]\nruby_contexts = "{"A" * 100_000}"\n')
    assert one_error_line(run_cli(env, "profiles", "list")) == (
        f"error: {path}: local.ruby_contexts must be a boolean, not a string "
        f"('{'A' * 59}…); fix or remove it"
    )


OUT_OF_ORDER = """\
# My settings.
[profiles.foo]  # the first one
url = "https://foo.example"
token_env = "FOO"
note = "keep me"

[ui]
theme = "gruvbox"  # dark

[profiles.bar]  # the second one
url = "https://bar.example"
token_env = "BAR"
"""


def test_saving_keeps_comments_and_unknown_keys_of_out_of_order_tables(tmp_path: Path) -> None:
    """Profiles on both sides of another table were rewritten as one new table: comments
    and unknown keys were lost and the file reordered."""
    env = cli_env(tmp_path)
    path = write_config(tmp_path, OUT_OF_ORDER)
    added = run_cli(env, "-q", "profiles", "add", "new1", "--url", URL, "--token-env", "X")
    assert added.returncode == 0, added.stderr
    new_table = f'[profiles.new1]\nurl = "{URL}"\ntoken_env = "X"\n\n'
    first, rest = OUT_OF_ORDER.split("[ui]")
    assert path.read_text() == f"{first}{new_table}[ui]{rest}"
    replaced = run_cli(env, "-q", "profiles", "add", "bar", "--url", URL, "--token-env", "B2",
                       "--force")  # fmt: skip
    assert replaced.returncode == 0, replaced.stderr
    changed = OUT_OF_ORDER.replace('"https://bar.example"', f'"{URL}"').replace('"BAR"', '"B2"')
    assert path.read_text() == changed.replace("[ui]", f"{new_table}[ui]")
    assert run_cli(env, "profiles", "remove", "new1").returncode == 0
    assert run_cli(env, "profiles", "remove", "bar").returncode == 0
    assert path.read_text() == OUT_OF_ORDER.split("[profiles.bar]")[0]


def test_saving_edits_inline_tables_in_place(tmp_path: Path) -> None:
    """An inline profile lost its unknown keys and comment when replaced, and an inline
    `ui` table its unknown keys when a profile was added."""
    env = cli_env(tmp_path)
    text = (
        'ui = { theme = "gruvbox", font = "keepme" }\n'
        "[profiles]\n"
        'foo = { url = "https://foo.example", token_env = "FOO", extra = "keepme" }  # mine\n'
    )
    path = write_config(tmp_path, text)
    added = run_cli(env, "-q", "profiles", "add", "new1", "--url", URL, "--token-env", "X")
    assert added.returncode == 0, added.stderr
    new_table = f'\n[profiles.new1]\nurl = "{URL}"\ntoken_env = "X"\n\n'
    assert path.read_text() == text + new_table
    replaced = run_cli(env, "-q", "profiles", "add", "foo", "--url", "https://foo.example",
                       "--token-env", "FOO2", "--force")  # fmt: skip
    assert replaced.returncode == 0, replaced.stderr
    assert path.read_text() == text.replace('"FOO"', '"FOO2"') + new_table


def test_profiles_of_dotted_keys_or_an_inline_table_are_added_and_removed(
    tmp_path: Path,
) -> None:
    """`profiles remove` said "removed" and left such a profile in the file."""
    env = cli_env(tmp_path)
    for text, with_new1 in [
        (
            'profiles.foo.url = "https://foo.example"  # mine\n'
            'profiles.foo.token_env = "FOO"\n'
            'ui.theme = "gruvbox"\n',
            'profiles.foo.url = "https://foo.example"  # mine\n'
            f'profiles.new1 = {{url = "{URL}", token_env = "X"}}\n'
            'profiles.foo.token_env = "FOO"\n'
            'ui.theme = "gruvbox"\n',
        ),
        (
            'profiles = { foo = { url = "https://foo.example", token_env = "FOO" } }\n',
            'profiles = { foo = { url = "https://foo.example", token_env = "FOO" }, '
            f'new1 = {{url = "{URL}", token_env = "X"}}}}\n',
        ),
    ]:
        path = write_config(tmp_path, text)
        added = run_cli(env, "profiles", "add", "new1", "--url", URL, "--token-env", "X")
        assert added.returncode == 0, added.stderr
        assert path.read_text() == with_new1
        removed = run_cli(env, "profiles", "remove", "foo")
        assert removed.returncode == 0, removed.stderr
        assert removed.stdout == "removed profile foo\n"
        assert "foo" not in tomllib.loads(path.read_text())["profiles"], path.read_text()
        assert list(Config.load(path).profiles) == ["new1"]


def test_a_change_that_cannot_be_made_in_place_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever tomlkit cannot edit as asked is an error, never a change reported as made
    (here tomlkit's edits are made to do nothing)."""
    path = write_config(tmp_path, USER_CONFIG)
    monkeypatch.setattr(config_module, "_apply_to_document", lambda document, edit: None)
    config = Config.load(path)
    del config.profiles["staging"]
    with pytest.raises(ConfigError, match=r"profiles\.staging cannot be changed in place"):
        config.save()
    assert path.read_text() == USER_CONFIG


def test_a_profile_added_meanwhile_by_another_command_is_not_replaced(tmp_path: Path) -> None:
    """Two `profiles add x` at once both said "added": each checked that x did not exist
    before taking the save's lock, and the second replaced the first (found by a
    review)."""
    path = write_config(tmp_path, USER_CONFIG)
    first, second = Config.load(path), Config.load(path)
    first.profiles["x"] = RemoteProfile("x", "https://first.example", token_env="A")
    first.save()
    second.profiles["x"] = RemoteProfile("x", "https://second.example", token_env="B")
    with pytest.raises(ConfigError, match="profile 'x' was added by another command meanwhile"):
        second.save()
    assert Config.load(path).profiles["x"].url == "https://first.example"


def test_concurrent_profile_adds_all_land(tmp_path: Path) -> None:
    """Ten at once: one failed on the shared temporary file, and the last save won."""
    env = cli_env(tmp_path)
    write_config(tmp_path, USER_CONFIG)
    names = [f"c{number}" for number in range(10)]

    def add(name: str) -> str:
        return run_cli(env, "-q", "profiles", "add", name, "--url", URL, "--token-env", "X").stderr

    with ThreadPoolExecutor(len(names)) as pool:
        assert list(pool.map(add, names)) == [""] * len(names)
    assert sorted(Config.load(config_path(tmp_path)).profiles) == sorted([*names, "staging"])
    assert "# behind the VPN" in config_path(tmp_path).read_text()
    assert sorted(os.listdir(tmp_path / "config")) == ["config.toml", "config.toml.lock"]


def test_a_symlinked_config_is_written_through_to_its_target(tmp_path: Path) -> None:
    """`profiles add` replaced the link with a file, and the dotfile missed the profile."""
    env = cli_env(tmp_path)
    dotfile = tmp_path / "dotfiles" / "sw.toml"
    dotfile.parent.mkdir()
    dotfile.write_text(USER_CONFIG)
    config_path(tmp_path).parent.mkdir()
    config_path(tmp_path).symlink_to(dotfile)
    added = run_cli(env, "-q", "profiles", "add", "dev", "--url", URL, "--token-env", "X")
    assert added.returncode == 0, added.stderr
    assert config_path(tmp_path).readlink() == dotfile
    assert "[profiles.dev]" in dotfile.read_text()
    assert "# behind the VPN" in dotfile.read_text()
    assert os.listdir(dotfile.parent) == ["sw.toml"]


def test_a_token_that_cannot_be_sent_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """Undecodable bytes as a token were "unexpected UnicodeEncodeError" and left an empty
    temporary file; a token with a space or a non-ASCII letter cannot be a bearer token
    (and with --keyring was refused by the keyring's call, exit 1). `Config.save` refuses
    one too."""
    keyring_file = tmp_path / "keyring.json"
    env = cli_env(
        tmp_path,
        PYTHON_KEYRING_BACKEND="tests.cli.FileKeyring",
        TEST_KEYRING_FILE=str(keyring_file),
    )
    add = ("profiles", "add", "t", "--url", URL, "--insecure-store-token")
    undecodable = subprocess.run(
        [str(SCRIPT), *add], input=b"\xff\xfeabc\n", env=env, capture_output=True, timeout=60
    )
    refused = [undecodable.returncode, undecodable.stderr.decode(errors="replace")]
    for token in ("tok en", "tökén"):
        given = run_cli(env, *add, stdin=f"{token}\n")
        refused += [given.returncode, given.stderr]
    keyring = ("profiles", "add", "t", "--url", URL, "--keyring", "--token-stdin")
    given = run_cli(env, *keyring, stdin="tok en\n")
    refused += [given.returncode, given.stderr]
    message = (
        "error: the token holds a space or a character outside visible ASCII, which no "
        "header can carry; nothing was stored\n"
    )
    assert refused == [2, message] * 4
    assert not config_path(tmp_path).exists() and not keyring_file.exists()
    config = Config.load(config_path(tmp_path))
    config.profiles["t"] = RemoteProfile("t", URL, token="tok en")
    with pytest.raises(ConfigError, match="the token of profile 't' is not stored"):
        config.save()
    stored = run_cli(env, *add, stdin="good-token_1\n")
    assert stored.returncode == 0, stored.stderr
    assert Config.load(config_path(tmp_path)).profiles["t"].token == "good-token_1"


def test_a_token_typed_on_a_terminal_is_asked_for_and_not_echoed(tmp_path: Path) -> None:
    """`--insecure-store-token` on a terminal waited without a prompt and echoed the token
    as it was typed (QA): it prompts, as `--keyring` does, without echo."""
    env = cli_env(tmp_path)
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [str(SCRIPT), "profiles", "add", "t", "--url", URL, "--insecure-store-token"],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env=env,
    )
    os.close(terminal)
    shown = bytearray()
    try:
        while b"Token: " not in shown:
            ready, _, _ = select.select([controller], [], [], 30)
            assert ready, f"no prompt: {bytes(shown)!r}"
            shown += os.read(controller, 4096)
        os.write(controller, b"SECRETsecretSECRET99\n")
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the command ended
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(controller)
    assert process.wait(timeout=60) == 0
    assert b"SECRET" not in shown and b"added profile t" in shown
    assert Config.load(config_path(tmp_path)).profiles["t"].token == "SECRETsecretSECRET99"


def test_a_closed_stdin_gives_no_token(tmp_path: Path) -> None:
    """A closed stdin was "unexpected AttributeError" (review): no token, or nothing to
    read, a usage error."""
    for args, said in [
        (("profiles", "add", "t", "--url", URL, "--insecure-store-token"), "empty token"),
        (("profiles", "add", "t", "--url", URL, "--keyring"), "empty token"),
        (("--no-daemon", "run", "-l", "python", "-"), "cannot read -: stdin is closed"),
        (("--no-daemon", "files", "put", "x", "-", "/workspace/a"), "stdin is closed"),
    ]:
        closed = subprocess.run(
            ["bash", "-c", '"$@" 0<&-', "bash", str(SCRIPT), *args],
            env=cli_env(  # a keyring that is there: one that is not is said first
                tmp_path,
                PYTHON_KEYRING_BACKEND="tests.cli.FileKeyring",
                TEST_KEYRING_FILE=str(tmp_path / "keyring.json"),
            ),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert closed.returncode == 2 and said in closed.stderr, (args, closed.stderr)
        assert "Traceback" not in closed.stderr and "unexpected" not in closed.stderr


def test_a_token_on_stdin_for_an_env_var_profile_is_refused(tmp_path: Path) -> None:
    """`--token-stdin --token-env VAR` dropped the token it read, unsaid (QA)."""
    env = cli_env(tmp_path)
    both = run_cli(env, "profiles", "add", "s", "--url", URL, "--token-stdin", "--token-env", "T")
    assert both.returncode == 2
    assert "--token-stdin goes with --keyring or --insecure-store-token" in both.stderr
    assert not config_path(tmp_path).exists()
