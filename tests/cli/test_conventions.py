"""Conventions every command follows: `--json`, examples in `--help`, shell completion,
`NO_COLOR`, `--quiet`, and counts in words (`1 engine`, `2 engines`, never `engine(s)`)."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tests.cli import SCRIPT, cli_env, run_cli
from tests.conftest import require_engine
from tests.test_context_restart import corrupt_snapshots
from workbench.cli.main import COMMANDS, main


def all_command_paths() -> list[list[str]]:
    """Every leaf command, as the words that invoke it (`["files", "ls"]`)."""
    context = click.Context(main)

    def leaves(words: list[str], command: click.Command | None) -> list[list[str]]:
        if not isinstance(command, click.Group):
            return [words]
        return [
            path for name, sub in command.commands.items() for path in leaves([*words, name], sub)
        ]

    return [path for name in COMMANDS for path in leaves([name], main.get_command(context, name))]


def test_every_command_help_has_examples() -> None:
    """In this process: `--help` renders the same text, without a process per command."""
    missing = []
    for words in all_command_paths():
        shown = CliRunner().invoke(main, [*words, "--help"]).output
        if not re.search(r"Examples:\n +(sandbox-workbench|echo) ", shown):
            missing.append(" ".join(words))
    assert missing == []


def test_no_command_gives_an_option_name_twice() -> None:
    """`files mkdir -p` once meant both `--parents` and `--profile`: click warned on every
    call and `-p` took the profile's argument."""
    context = click.Context(main)
    twice = []
    for words in all_command_paths():
        command: click.Command | None = main
        for word in words:
            assert isinstance(command, click.Group)
            command = command.get_command(context, word)
        assert command is not None
        names = [
            name
            for param in command.params
            if isinstance(param, click.Option)
            for name in [*param.opts, *param.secondary_opts]
        ]
        twice += [f"{' '.join(words)} {name}" for name in set(names) if names.count(name) > 1]
    assert twice == []


def test_sandboxes_info_reads_as_text_and_as_json(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    run_cli(env, "files", "put", "box", "-", "a.txt", stdin="12345")
    shown = run_cli(env, "sandboxes", "info", "box")
    assert shown.returncode == 0
    assert "sandbox    box\n" in shown.stdout
    assert "workspace  1 entry, 5 B\n" in shown.stdout
    info = json.loads(run_cli(env, "sandboxes", "info", "box", "--json").stdout)
    assert info["id"] == "box" and info["workspace"] == {"files": 1, "bytes": 5}


def test_sandboxes_info_estimates_what_the_kept_runs_would_cost(
    tmp_path: Path, perl_engine: None
) -> None:
    env = cli_env(tmp_path)
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[prices]\nrows_written_per_million = 1000000\nsource = "a test"\n')
    try:
        for code in ("our $n = 1", "$n + 1"):
            assert run_cli(env, "run", "-s", "box", "-l", "perl", "-c", code).returncode == 0
        shown = run_cli(env, "sandboxes", "info", "box")
        assert shown.returncode == 0, shown.stderr
        (line,) = [line for line in shown.stdout.splitlines() if line.startswith("cost ")]
        assert line.startswith("cost       ≈ $")
        assert line.endswith(
            " on Workers for the 2 runs kept (an estimate, not a bill; "
            "prices of unknown date from a test)"
        )
        # A row written costs a dollar here: at least the 4 context and meta rows a run.
        assert float(line.split("$", 1)[1].split(" ", 1)[0]) >= 8
    finally:
        run_cli(env, "daemon", "stop")


def complete(env: dict[str, str], words: str) -> list[str]:
    """What bash completion offers for the last (possibly empty) word of `words`."""
    parts = words.split(" ")
    completed = subprocess.run(
        [str(SCRIPT)],
        env={
            **env,
            "_SANDBOX_WORKBENCH_COMPLETE": "bash_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(parts) - 1),
        },
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert completed.returncode == 0 and completed.stderr == ""
    return [line.split(",", 1)[1] for line in completed.stdout.splitlines() if line]


def test_completion_of_profiles_bindings_and_local_sandbox_ids(tmp_path: Path) -> None:
    env = cli_env(tmp_path, TOK="t" * 20)
    run_cli(env, "profiles", "add", "staging", "--url", "https://s.example", "--token-env", "TOK")
    for sandbox in ("alpha", "beta", "alps"):
        run_cli(env, "files", "mkdir", sandbox, "d")
    assert complete(env, "sandbox-workbench -p ") == ["local", "staging"]
    assert complete(env, "sandbox-workbench sandboxes list --profile st") == ["staging"]
    assert complete(env, "sandbox-workbench run -b P") == ["PYTHON", "PERL"]
    assert complete(env, "sandbox-workbench sandboxes info al") == ["alpha", "alps"]
    assert complete(env, "sandbox-workbench files ls ") == ["alpha", "alps", "beta"]
    assert complete(env, "sandbox-workbench run -s b") == ["beta"]
    # Remote ids are not listed (too slow); a broken store just offers nothing.
    assert complete(env, "sandbox-workbench sandboxes info -p staging a") == []
    run_cli(env, "daemon", "stop")  # the store's owner, whose log would still hold the ids
    (tmp_path / "data" / "workbench.sqlite3").write_bytes(b"garbage" * 1000)
    assert complete(env, "sandbox-workbench sandboxes info a") == []


def output_on_a_terminal(env: dict[str, str], *args: str) -> str:
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [str(SCRIPT), *args], stdout=terminal, stderr=terminal, env={**env, "TERM": "xterm"}
    )
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    process.wait(timeout=60)
    return shown.decode(errors="replace")


def test_no_color_is_honoured_on_a_terminal(tmp_path: Path) -> None:
    require_engine("perl")
    env = cli_env(tmp_path)
    failing = ("run", "-l", "perl", "-c", 'die "boom\\n"')
    assert "\x1b[31mPerlError: boom" in output_on_a_terminal(env, *failing)
    plain = output_on_a_terminal({**env, "NO_COLOR": "1"}, *failing)
    assert "PerlError: boom" in plain
    assert "\x1b[" not in plain


def test_quiet_keeps_results_and_drops_notes(tmp_path: Path) -> None:
    require_engine("python")
    env = cli_env(tmp_path)
    data = Path(env["SANDBOX_WORKBENCH_DATA_DIR"])
    assert run_cli(env, "run", "-s", "py", "-l", "python", "-c", "x = 1").returncode == 0
    run_cli(env, "daemon", "stop")  # its live context would not need the snapshot
    corrupt_snapshots(data, "host")  # the next run starts fresh, with a note
    noisy = run_cli(env, "run", "-s", "py", "-l", "python", "-c", "6 * 7")
    assert "warning:" in noisy.stderr
    run_cli(env, "daemon", "stop")
    corrupt_snapshots(data, "host")
    quiet = run_cli(env, "-q", "run", "-s", "py", "-l", "python", "-c", "6 * 7")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "42\n", "")
    failed = run_cli(env, "-q", "run", "-l", "python", "-c", "1/0")
    assert failed.returncode == 1
    assert "ZeroDivisionError" in failed.stderr
    # Nor the note that the daemon was restarted with other settings.
    restarted = run_cli(env, "-q", "--no-file-api", "run", "-s", "py", "-l", "python", "-c", "1")
    assert (restarted.returncode, restarted.stdout, restarted.stderr) == (0, "1\n", "")
    kept = run_cli(env, "run", "-l", "python", "-c", "2")  # asks nothing: the daemon stays
    assert (kept.returncode, kept.stdout, kept.stderr) == (0, "2\n", "")
    back = run_cli(env, "--file-api", "run", "-l", "python", "-c", "3")
    assert "restarted the local daemon" in back.stderr
    run_cli(env, "daemon", "stop")


@pytest.mark.parametrize(
    ("waiting", "said"),
    [
        ([], None),
        (["perl"], "the perl engine is not prepared: the first run in it prepares it"),
        (
            ["javascript", "perl", "ruby"],
            "the javascript, perl and ruby engines are not prepared: the first run of each "
            "prepares it",
        ),
    ],
)
def test_serve_names_the_engines_not_prepared_in_words(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    waiting: list[str],
    said: str | None,
) -> None:
    from engines import status
    from workbench.cli import serve_command

    def statuses() -> list[status.EngineStatus]:
        return [
            status.EngineStatus(
                language,
                language,
                "1",
                True,
                True,
                status.EngineState.NOT_PREPARED
                if language in waiting
                else status.EngineState.READY,
            )
            for language in ("javascript", "perl", "python", "ruby")
        ]

    monkeypatch.setattr(status, "all_statuses", statuses)
    serve_command._note_unprepared_engines()
    printed = capsys.readouterr().err
    assert printed == (
        ""
        if said is None
        else f"note: {said} (minutes); `sandbox-workbench "
        "engines install` does it now, with progress\n"
    )
