"""What commands say at their edges: nothing to delete or destroy, a directory without
-r, a built-in profile, empty option values, closed output streams, help that tells the
real defaults, counts and sizes for people, and inspect offsets past the end."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import click

from tests.cli import SCRIPT, cli_env, one_error_line, run_cli
from tests.cli.test_conventions import all_command_paths
from workbench.backends.remote import DEFAULT_TIMEOUT
from workbench.cli.main import main
from workbench.config import DEFAULT_TIMEOUT_S


def test_exporting_from_a_sandbox_that_does_not_exist_makes_none(tmp_path: Path) -> None:
    """With a prefix of a context id, `transcript export` listed the sandbox's contexts
    first, which made the sandbox, then said it had no such context (found by an attack
    review)."""
    env = cli_env(tmp_path)
    try:
        for context in ("95a56d20", "00000000-0000-4000-8000-000000000000"):
            args = ("transcript", "export", "-s", "zzz", "--context", context, "-o", "-")
            exported = run_cli(env, *args)
            assert exported.returncode == 4, exported.stderr
            assert one_error_line(exported).startswith("error: no sandbox 'zzz' on local")
        assert run_cli(env, "sandboxes", "list").stdout == "no sandboxes\n"
    finally:
        run_cli(env, "daemon", "stop")


def test_destroy_and_rm_say_when_there_was_nothing(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    try:
        never = run_cli(env, "sandboxes", "destroy", "never-existed", "-y")
        assert never.returncode == 0, never.stderr
        assert never.stdout.startswith("nothing to destroy: no sandbox never-existed on local (")
        assert run_cli(env, "files", "put", "box", "-", "a.txt", stdin="1").returncode == 0
        declined = run_cli(env, "sandboxes", "destroy", "box", stdin="n\n")
        assert declined.returncode == 1
        assert "Destroy sandbox box on local (" in declined.stdout
        assert "destroying" not in declined.stderr  # announced only once confirmed

        missing = run_cli(env, "files", "rm", "box", "gone.txt", "-f")
        assert (missing.returncode, missing.stdout) == (
            0,
            "nothing to delete: no gone.txt in sandbox box\n",
        )
        assert run_cli(env, "files", "mkdir", "box", "dir").returncode == 0
        directory = run_cli(env, "files", "rm", "box", "dir")
        assert directory.returncode == 2
        # Announced as an attempt (it was announced as a deletion), and it says none came.
        assert directory.stderr.startswith("asking to delete dir in sandbox box on local (")
        assert one_error_line(directory) == (
            "error: dir is a directory, so nothing was deleted: pass -r to delete it with "
            "everything in it"
        )
        removed = run_cli(env, "files", "rm", "box", "a.txt", "-f")
        assert (removed.returncode, removed.stdout) == (0, "deleted /workspace/a.txt\n")
        destroyed = run_cli(env, "sandboxes", "destroy", "box", "-y")
        assert (destroyed.returncode, destroyed.stdout) == (0, "destroyed box\n")
    finally:
        run_cli(env, "daemon", "stop")


def test_mkdir_says_what_failed_without_the_files_apis_internal_status(tmp_path: Path) -> None:
    """The files API answers a failed mkdir FILESYSTEM_ERROR 500 (spec 4.3): the CLI said
    `Already exists: src (FILESYSTEM_ERROR, HTTP 500)`, which reads as a backend fault."""
    env = cli_env(tmp_path)
    try:
        assert run_cli(env, "files", "mkdir", "box", "src").returncode == 0
        assert run_cli(env, "files", "put", "box", "-", "f.txt", stdin="1").returncode == 0
        again = run_cli(env, "files", "mkdir", "box", "src")
        assert (again.returncode, one_error_line(again)) == (
            1,
            "error: src already exists in sandbox box",
        )
        kept = run_cli(env, "files", "mkdir", "box", "src", "--parents")
        assert (kept.returncode, kept.stdout) == (0, "created /workspace/src\n")
        orphan = run_cli(env, "files", "mkdir", "box", "no/such")
        assert (orphan.returncode, one_error_line(orphan)) == (
            4,
            "error: the directory no/such would be in does not exist in sandbox box: pass "
            "--parents to make it too",
        )
        under_file = run_cli(env, "files", "mkdir", "box", "f.txt/sub", "--parents")
        assert (under_file.returncode, one_error_line(under_file)) == (
            1,
            "error: cannot make f.txt/sub in sandbox box: it, or a part of its path, is a file",
        )
    finally:
        run_cli(env, "daemon", "stop")


def test_the_local_profile_cannot_be_removed(tmp_path: Path) -> None:
    removed = run_cli(cli_env(tmp_path), "profiles", "remove", "local")
    assert removed.returncode == 2
    assert one_error_line(removed) == ("error: the local profile is built in and cannot be removed")


def test_an_empty_option_value_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    cases = [
        (("run", "-s", "demo", "--context", "", "-c", "x"), "'--context'"),
        (("run", "-s", "", "-l", "perl", "-c", "x"), "'--sandbox' / '-s'"),
        (("contexts", "list", "-s", ""), "'--sandbox' / '-s'"),
        (("contexts", "fork", "-s", "demo", "--context", ""), "'--context'"),
        (("transcript", "export", "-s", "", "--context", "x", "-o", "-"), "'--sandbox' / '-s'"),
        # `-p "$PROD"` with PROD unset acted on the local store (QA).
        (("-p", "", "sandboxes", "list"), "'--profile' / '-p'"),
        (("sandboxes", "list", "-p", ""), "'--profile' / '-p'"),
        (("run", "--profile=", "-l", "perl", "-c", "x"), "'--profile' / '-p'"),
    ]
    for args, option in cases:
        refused = run_cli(env, *args)
        assert refused.returncode == 2, args
        assert f"Invalid value for {option}: must not be empty" in refused.stderr, args


def test_an_invalid_sandbox_id_is_refused_before_a_daemon_starts(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    cases = [
        (("files", "ls", "../up"), "'SANDBOX_ID'", 'Invalid sandbox id "../up": must match'),
        (("sandboxes", "info", "www"), "'SANDBOX_ID'", "'www' is a reserved name"),
        (("run", "-s", "-x", "-l", "perl", "-c", "1"), "'-s'", "cannot start or end with a hyphen"),
        (("contexts", "list", "-s", "a/b"), "'-s'", 'id "a/b": must match'),
        (("diff", "--against", "local", "-s", "x" * 64, "-l", "perl", "-c", "1"), "'-s'", "{1,63}"),
        (("watch", str(tmp_path), "--once", "-s", "Admin"), "'-s'", "'Admin' is a reserved"),
        # Quoted neutralised: it printed the escape sequence raw (found by an attack review).
        (("files", "ls", "a\x1b]0;T\x07"), "'SANDBOX_ID'", '"a\\x1b]0;T\\x07": must match'),
    ]
    try:
        for args, option, problem in cases:
            refused = run_cli(env, *args)
            assert refused.returncode == 2, args
            assert f"{option}: Invalid sandbox id" in refused.stderr, args
            assert problem in refused.stderr, args
            assert "\x1b" not in refused.stderr
        # Not one of them opened the local backend, which would have started its daemon.
        assert not (tmp_path / "data").exists()
        status = run_cli(env, "daemon", "status")
        assert status.stdout.startswith("no local daemon runs for"), status.stdout
    finally:
        run_cli(env, "daemon", "stop")


def run_with_closed(
    descriptor: int, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """The console script with stdout (1) or stderr (2) closed, as `>&-` and `2>&-` do."""
    return subprocess.run(
        ["sh", "-c", f'exec "$0" "$@" {descriptor}>&-', str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_a_closed_stdout_or_stderr_ends_quietly(tmp_path: Path, perl_engine: None) -> None:
    env = cli_env(tmp_path)
    # `engines list` asked a closed stdout whether it is a terminal: a bug said (QA).
    commands = (("--no-daemon", "run", "-l", "perl", "-c", "6 * 7"), ("profiles", "list"))
    for args in (*commands, ("engines", "list")):
        no_stdout = run_with_closed(1, env, *args)
        assert (no_stdout.returncode, no_stdout.stderr) == (1, ""), args
    # Without stderr the lines for it are dropped and the exit code still tells.
    failed = run_with_closed(2, env, "--no-daemon", "run", "-l", "perl", "-c", 'die "x\\n"')
    assert (failed.returncode, failed.stdout) == (1, "")
    refused = run_with_closed(2, env, "profiles", "remove", "nowhere")
    assert (refused.returncode, refused.stdout) == (2, "")
    ran = run_with_closed(2, env, "--no-daemon", "run", "-l", "perl", "-c", "6 * 7")
    assert (ran.returncode, ran.stdout) == (0, "42\n")


def test_a_file_read_into_a_pipe_that_stopped_reading_exits_1(tmp_path: Path) -> None:
    """QA: `files cat … | head -c 1` of a large file exited 0: the pipe took part of the
    write and the reader went away."""
    env = cli_env(tmp_path) | {"SANDBOX_WORKBENCH_NO_DAEMON": "1"}
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(1 << 20))
    assert run_cli(env, "files", "put", "pipe", str(source)).returncode == 0
    for _ in range(3):  # the reader may leave before or during the write
        statuses = subprocess.run(
            [
                "bash",
                "-c",
                '"$0" files cat pipe big.bin | head -c 1 >/dev/null; echo "${PIPESTATUS[0]}"',
                str(SCRIPT),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert (statuses.stdout.strip(), statuses.stderr) == ("1", "")


def test_a_read_from_a_fifo_no_one_writes_to_ends_at_sigterm(tmp_path: Path) -> None:
    """QA: `timeout 5 … files put demo fifo` kept waiting for a writer: the blocking read
    held the event loop, whose SIGTERM handler never ran."""
    env = cli_env(tmp_path) | {"SANDBOX_WORKBENCH_NO_DAEMON": "1"}
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases = [
        (("files", "put", "box", str(fifo)), signal.SIGTERM),
        (("run", "-l", "perl", str(fifo)), signal.SIGTERM),
        (("files", "put", "box", str(fifo)), signal.SIGINT),  # one Ctrl+C (a review)
    ]
    for args, signum in cases:
        waiting = subprocess.Popen([str(SCRIPT), *args], env=env, stderr=subprocess.PIPE)
        try:
            time.sleep(1.0)  # into the open, which waits for a writer
            waiting.send_signal(signum)
            _, stderr = waiting.communicate(timeout=10)
        finally:
            waiting.kill()  # one that did not stop (the test fails) is not left behind
        assert waiting.returncode == 128 + signum, stderr
        assert b"Traceback" not in stderr
    listed = run_cli(env, "files", "ls", "box")
    assert "fifo" not in listed.stdout


def test_a_lone_surrogate_prints_and_exports_as_its_escape(
    tmp_path: Path, javascript_engine: None
) -> None:
    """JSON carries lone surrogates (a JavaScript string may hold one), UTF-8 cannot: the
    CLI crashed with "unexpected UnicodeEncodeError (a bug)", and an export with `--force`
    emptied the file it was to replace before it failed."""
    env = cli_env(tmp_path)
    context_id = run_cli(env, "contexts", "create", "-s", "odd", "-l", "javascript").stdout
    where = ("-s", "odd", "--context", context_id.strip())
    ran = run_cli(env, "run", *where, "-c", '["a\\ud800b"]')
    assert (ran.returncode, ran.stdout) == (0, '[\n  "a\\ud800b"\n]\n'), ran.stderr
    as_json = run_cli(env, "run", *where, "--json", "-c", '["a\\ud800b"]')
    assert json.loads(as_json.stdout)["results"] == [{"json": ["a\ud800b"]}]
    for name in ("cells.md", "cells.json"):
        target = tmp_path / name
        target.write_text("kept until replaced")
        exported = run_cli(env, "transcript", "export", *where, "-o", str(target), "--force")
        assert exported.returncode == 0, exported.stderr
        assert "a\\ud800b" in target.read_text()
    assert json.loads((tmp_path / "cells.json").read_text())["cells"][0]["outcome"] is not None


def flat_help(env: dict[str, str], *words: str) -> str:
    """A command's --help with its line breaks and indents as single spaces."""
    return " ".join(run_cli(env, *words, "--help").stdout.split())


def test_help_tells_the_real_defaults_and_exit_codes(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    shown = flat_help(env, "run")
    assert (
        f"else {DEFAULT_TIMEOUT_S:g} on the local backend and {DEFAULT_TIMEOUT.read:g} on a "
        "remote profile" in shown
    )
    assert "4 code context not found (a sandbox comes into being on first use)" in shown
    top = flat_help(env)
    assert "4 not found: a /workspace file, code context, checkpoint or inspected name" in top
    assert "4 not found (sandbox" not in top


def test_every_option_is_described_and_the_listing_names_every_subcommand(
    tmp_path: Path,
) -> None:
    context = click.Context(main)
    undescribed = []
    for words in all_command_paths():
        command: click.Command | None = main
        for word in words:
            assert isinstance(command, click.Group)
            command = command.get_command(context, word)
        assert command is not None
        undescribed += [
            f"{' '.join(words)} {param.opts[0]}"
            for param in command.params
            if isinstance(param, click.Option) and not param.help
        ]
    assert undescribed == []
    listing = run_cli(cli_env(tmp_path), "--help").stdout
    for group in ("contexts", "sandboxes"):
        (line,) = [line for line in listing.splitlines() if line.strip().startswith(group + " ")]
        subcommands = main.get_command(context, group)
        assert isinstance(subcommands, click.Group)
        said = {"info": "inspect"}  # `sandboxes info` is listed as inspecting
        missing = [
            name
            for name in subcommands.commands
            if not re.search(rf"\b{said.get(name, name)}\b", line, re.IGNORECASE)
        ]
        assert missing == [], line


def test_counts_and_sizes_read_as_words(tmp_path: Path, perl_engine: None) -> None:
    env = cli_env(tmp_path)
    try:
        put = run_cli(env, "files", "put", "demo", "-", "a.txt", stdin="12345")
        assert put.stdout == "wrote 5 B to /workspace/a.txt\n"
        assert run_cli(env, "run", "-s", "demo", "-l", "perl", "-c", "our $n = 1").returncode == 0
        (line,) = run_cli(env, "contexts", "list", "-s", "demo").stdout.splitlines()
        assert re.search(r"  1 run  snapshot \d+(\.\d)? (B|KiB|MiB)  last used ", line), line
        info = run_cli(env, "sandboxes", "info", "demo").stdout
        assert "workspace  1 entry, 5 B\n" in info
        assert " 1 run, last " in info
        context = line.split()[0]
        where = ("-s", "demo", "--context", context)
        saved = run_cli(env, "contexts", "checkpoint", "save", "one", *where)
        assert re.search(r"after run 1  \d+(\.\d)? (B|KiB|MiB)\n$", saved.stdout), saved.stdout
        assert "replaced" not in saved.stderr
        again = run_cli(env, "contexts", "checkpoint", "save", "one", *where)
        assert re.search(r"replaced the checkpoint one saved \S+ after run 1\n", again.stderr)
        listed = run_cli(env, "contexts", "checkpoint", "list", *where)
        assert re.search(r"hold \d+(\.\d)? (B|KiB|MiB) of their 256\.0 MiB budget", listed.stderr)
        exported = run_cli(env, "transcript", "export", *where, "-o", str(tmp_path / "t.json"))
        assert exported.stderr.endswith(f"wrote 1 cell to {tmp_path / 't.json'}\n")
        # After a restore, the replayable export says a replay differs; a document does not
        # (QA: the note came with Markdown too).
        assert run_cli(env, "contexts", "checkpoint", "restore", "one", *where).returncode == 0
        for name, says in (("t2.json", True), ("t.md", False), ("t.ipynb", False)):
            exported = run_cli(env, "transcript", "export", *where, "-o", str(tmp_path / name))
            assert exported.returncode == 0, exported.stderr
            assert ("restored checkpoint one" in exported.stderr) == says, (name, exported.stderr)
    finally:
        run_cli(env, "daemon", "stop")


def test_inspect_refuses_offsets_past_the_end_and_missing_names(
    tmp_path: Path, perl_engine: None
) -> None:
    env = cli_env(tmp_path)
    try:
        code = 'our $long = "ab" x 5000; 1'
        defined = run_cli(env, "run", "-s", "demo", "-l", "perl", "--json", "-c", code)
        where = ("-s", "demo", "--context", json.loads(defined.stdout)["context"]["id"][:8])
        last = run_cli(env, "contexts", "inspect", *where, "--name", "$long", "--offset", "10001")
        assert (last.returncode, last.stdout) == (0, '"\n')
        for offset in ("10002", "99999"):
            past = run_cli(
                env, "contexts", "inspect", *where, "--name", "$long", "--offset", offset
            )
            assert past.returncode == 2
            assert one_error_line(past) == (
                f"error: --offset {offset} is past the end of $long: it has 10002 characters"
            )
        alone = run_cli(env, "contexts", "inspect", *where, "--offset", "0")
        assert alone.returncode == 2 and "--offset needs --name" in alone.stderr
        missing = run_cli(env, "contexts", "inspect", *where, "--name", "$nope")
        assert missing.returncode == 4
        assert one_error_line(missing) == "error: The context has no name '$nope' to inspect"
    finally:
        run_cli(env, "daemon", "stop")


def test_the_workbench_without_a_terminal_is_refused(tmp_path: Path) -> None:
    """Piped or redirected, the interactive workbench would write its escapes into the
    file and wait for keys forever: it says to use a command instead."""
    env = cli_env(tmp_path)
    refused = run_cli(env, stdin="")  # stdin and stdout are pipes
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert refused.stderr.splitlines()[-1] == (
        "Error: the workbench needs a terminal (stdin and stdout); for scripts, use a "
        "command: `sandbox-workbench --help` lists them"
    )


def test_an_empty_token_variable_is_named_as_empty(tmp_path: Path) -> None:
    env = cli_env(tmp_path, DEV_TOKEN="")
    added = run_cli(
        env, "profiles", "add", "dev", "--url", "http://127.0.0.1:9", "--token-env", "DEV_TOKEN"
    )
    assert added.returncode == 0, added.stderr
    refused = run_cli(env, "sandboxes", "list", "-p", "dev")
    assert refused.returncode == 2
    assert one_error_line(refused) == (
        "error: profile 'dev' reads its token from $DEV_TOKEN, which is empty"
    )


def test_serve_s_timeout_help_is_about_serve(tmp_path: Path) -> None:
    shown = run_cli(cli_env(tmp_path), "serve", "--help")
    text = " ".join(shown.stdout.split())
    assert "whose request names none" in text and "Remote profile" not in text


def test_an_empty_path_is_a_usage_error_and_writes_nothing(tmp_path: Path) -> None:
    """QA: `files put demo a.txt ''` wrote /workspace/a.txt; `files cat demo ''` and
    `files rm demo '' -f` asked the backend, which answered VALIDATION_FAILED."""
    env = cli_env(tmp_path) | {"SANDBOX_WORKBENCH_NO_DAEMON": "1"}
    source = tmp_path / "a.txt"
    source.write_text("a")
    for args in (
        ("put", "box", str(source), ""),
        ("put", "box", "", "a.txt"),
        ("cat", "box", ""),
        ("rm", "box", "", "-f"),
        ("ls", "box", ""),
        ("mkdir", "box", ""),
    ):
        refused = run_cli(env, "files", *args)
        assert refused.returncode == 2, args
        assert "must not be empty" in refused.stderr, args
    assert not (tmp_path / "data" / "workbench.sqlite3").exists()  # no backend opened


def test_refusals_say_how_to_get_what_was_asked(tmp_path: Path) -> None:
    """QA: a file put into a missing folder said only "No such file or directory", and a
    Ruby context refused by default did not name the flag that allows it."""
    env = cli_env(tmp_path) | {"SANDBOX_WORKBENCH_NO_DAEMON": "1"}
    source = tmp_path / "a.txt"
    source.write_text("a")
    put = run_cli(env, "files", "put", "box", str(source), "/workspace/nope/a.txt")
    assert put.returncode == 4
    assert one_error_line(put) == (
        "error: No such file or directory: /workspace/nope does not exist "
        "(`files mkdir box /workspace/nope --parents` makes it)"
    )
    ruby = run_cli(env, "contexts", "create", "-s", "box", "-l", "ruby")
    assert ruby.returncode == 2
    assert one_error_line(ruby).endswith("(Ruby contexts are a local extension: --ruby-contexts)")
