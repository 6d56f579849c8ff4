"""`contexts create | delete | reset` and `sandboxes env`: what the workbench's context and
env var dialogs do, from the command line, through the console script and the daemon."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli import cli_env, one_error_line, run_cli


def test_create_delete_and_reset_contexts(tmp_path: Path, perl_engine: None) -> None:
    env = cli_env(tmp_path)
    try:
        created = run_cli(
            env, "contexts", "create", "-s", "demo", "-l", "perl", "--cwd", "/workspace/src"
        )
        assert created.returncode == 0, created.stderr
        first = created.stdout.strip()
        assert "created a PERL context in /workspace/src" in created.stderr
        as_json = run_cli(
            env, "contexts", "create", "-s", "demo", "-b", "PERL", "-e", "WHO=ctx", "--json"
        )
        second = json.loads(as_json.stdout)
        assert (second["binding"], second["cwd"]) == ("PERL", "/workspace")
        own_env = run_cli(env, "run", "-s", "demo", "--context", second["id"], "-c", "$ENV{WHO}")
        assert (own_env.returncode, own_env.stdout) == (0, "ctx\n"), own_env.stderr

        declined = run_cli(
            env, "contexts", "delete", "-s", "demo", "--context", first[:8], stdin="n\n"
        )
        assert declined.returncode == 1
        assert f"Delete PERL context {first} of sandbox demo on local (" in declined.stdout
        assert "deleting" not in declined.stderr  # announced only once confirmed
        deleted = run_cli(env, "contexts", "delete", "-s", "demo", "--context", first[:8], "-y")
        assert (deleted.returncode, deleted.stdout) == (0, f"deleted context {first}\n")
        assert deleted.stderr.startswith(f"deleting context {first} of sandbox demo on local (")
        gone = run_cli(env, "contexts", "delete", "-s", "demo", "--context", first, "-y")
        assert gone.returncode == 4
        assert one_error_line(gone) == f"error: Code context '{first}' not found in sandbox demo"

        run_cli(env, "run", "-s", "demo", "--context", second["id"], "-c", "our $n = 41")
        reset = run_cli(env, "contexts", "reset", "-s", "demo", "--context", second["id"], "-y")
        assert reset.returncode == 0, reset.stderr
        fresh = reset.stdout.strip()
        assert fresh != second["id"]
        listed = json.loads(run_cli(env, "contexts", "list", "-s", "demo", "--json").stdout)
        assert [(item["id"], item["executions"]) for item in listed["contexts"]] == [(fresh, 0)]
        empty = run_cli(env, "run", "-s", "demo", "--context", fresh, "-c", "defined $n ? 1 : 0")
        assert empty.stdout == "0\n"  # its REPL state went
    finally:
        run_cli(env, "daemon", "stop")


def test_the_context_limit_says_how_to_free_one(tmp_path: Path, perl_engine: None) -> None:
    env = cli_env(tmp_path)
    try:
        ids = []
        for _ in range(8):
            created = run_cli(env, "contexts", "create", "-s", "full", "-l", "perl")
            assert created.returncode == 0, created.stderr
            ids.append(created.stdout.strip())
        refused = run_cli(env, "run", "-s", "full", "-l", "python", "-c", "1")
        assert refused.returncode == 2
        assert one_error_line(refused).endswith(
            "Cannot create more than 8 code contexts (VALIDATION_FAILED, HTTP 400): delete one "
            "with `sandbox-workbench contexts delete -s SANDBOX --context ID` "
            "(`contexts list -s SANDBOX` lists them)"
        )
        freed = run_cli(env, "contexts", "delete", "-s", "full", "--context", ids[0], "-y")
        assert freed.returncode == 0, freed.stderr
        again = run_cli(env, "contexts", "create", "-s", "full", "-l", "perl")
        assert again.returncode == 0, again.stderr
    finally:
        run_cli(env, "daemon", "stop")


def test_sandbox_env_vars_are_shown_set_and_unset(tmp_path: Path, perl_engine: None) -> None:
    env = cli_env(tmp_path)
    try:
        assert run_cli(env, "sandboxes", "env", "demo").stdout == "no env vars\n"
        changed = run_cli(env, "sandboxes", "env", "demo", "A=1", "B=two words")
        assert (changed.returncode, changed.stdout) == (0, "set A, B in sandbox demo\n")
        assert run_cli(env, "sandboxes", "env", "demo").stdout == "A=1\nB=two words\n"
        seen = run_cli(env, "run", "-s", "demo", "-l", "perl", "-c", '"$ENV{A} $ENV{B}"')
        assert seen.stdout == "1 two words\n", seen.stderr

        unset = run_cli(env, "sandboxes", "env", "demo", "--unset", "A", "--unset", "Z", "--json")
        assert json.loads(unset.stdout) == {"envVars": {"B": "two words"}}
        assert "note: not set, so not unset: Z" in unset.stderr
        both = run_cli(env, "sandboxes", "env", "demo", "B=1", "--unset", "B")
        assert both.returncode == 2 and "B: both set and --unset" in both.stderr
        malformed = run_cli(env, "sandboxes", "env", "demo", "B")
        assert malformed.returncode == 2 and "expected KEY=VALUE, got 'B'" in malformed.stderr
    finally:
        run_cli(env, "daemon", "stop")
