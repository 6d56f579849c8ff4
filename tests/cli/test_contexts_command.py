"""`sandbox-workbench contexts list | inspect | fork | checkpoint` through the console
script and the local daemon."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli import cli_env, one_error_line, run_cli
from workbench.api.display import human_bytes


def test_list_and_fork_contexts(tmp_path: Path, perl_engine: None) -> None:
    env = cli_env(tmp_path)
    try:
        empty = run_cli(env, "contexts", "list", "-s", "demo")
        assert (empty.returncode, empty.stdout) == (0, "no contexts\n")
        defined = run_cli(env, "run", "-s", "demo", "-l", "perl", "--json", "-c", "our $n = 41")
        assert defined.returncode == 0, defined.stderr
        origin = json.loads(defined.stdout)["context"]["id"]

        listed = run_cli(env, "contexts", "list", "-s", "demo")
        assert listed.returncode == 0, listed.stderr
        (line,) = listed.stdout.splitlines()
        assert line.startswith(f"{origin}  PERL  perl  /workspace  1 run  snapshot ")

        forked = run_cli(env, "contexts", "fork", "-s", "demo", "--context", origin[:8])
        assert forked.returncode == 0, forked.stderr
        fork = forked.stdout.strip()
        assert fork != origin and len(fork) == len(origin)
        assert f"forked {origin} into a new PERL context" in forked.stderr
        changed = run_cli(env, "run", "-s", "demo", "--context", fork, "-c", "$n += 1")
        assert (changed.returncode, changed.stdout) == (0, "42\n"), changed.stderr
        kept = run_cli(env, "run", "-s", "demo", "--context", origin, "-c", "$n")
        assert (kept.returncode, kept.stdout) == (0, "41\n"), kept.stderr

        as_json = json.loads(run_cli(env, "contexts", "list", "-s", "demo", "--json").stdout)
        runs = {context["id"]: context["executions"] for context in as_json["contexts"]}
        assert runs == {origin: 2, fork: 2}
        fork_json = run_cli(env, "contexts", "fork", "-s", "demo", "--context", fork, "--json")
        assert json.loads(fork_json.stdout)["binding"] == "PERL"

        unknown = run_cli(env, "contexts", "fork", "-s", "demo", "--context", "zz")
        assert unknown.returncode == 4
        assert one_error_line(unknown).startswith("error: Code context 'zz' not found")
    finally:
        run_cli(env, "daemon", "stop")


def test_checkpoints_survive_the_daemon_and_put_the_context_back(
    tmp_path: Path, perl_engine: None
) -> None:
    env = cli_env(tmp_path)
    try:
        defined = run_cli(env, "run", "-s", "demo", "-l", "perl", "--json", "-c", "our $n = 41")
        context = json.loads(defined.stdout)["context"]["id"]
        where = ("-s", "demo", "--context", context[:8])
        saved = run_cli(env, "contexts", "checkpoint", "save", "answer", *where)
        assert saved.returncode == 0, saved.stderr
        assert saved.stdout.startswith("answer  saved ") and "after run 1" in saved.stdout
        changed = run_cli(env, "run", "-s", "demo", "--context", context, "-c", "$n = 7")
        assert changed.returncode == 0, changed.stderr
        assert run_cli(env, "daemon", "stop").returncode == 0  # a new daemon process next

        listed = run_cli(env, "contexts", "checkpoint", "list", *where, "--json")
        (checkpoint,) = json.loads(listed.stdout)["checkpoints"]
        assert (checkpoint["name"], checkpoint["executions"]) == ("answer", 1)
        info = run_cli(env, "sandboxes", "info", "demo")
        assert f"  checkpoints: 1, {human_bytes(checkpoint['bytes'])} of a 256.0 MiB" in info.stdout
        restored = run_cli(env, "contexts", "checkpoint", "restore", "answer", *where)
        assert restored.returncode == 0, restored.stderr
        assert f"restored {context} to answer" in restored.stderr
        read = run_cli(env, "run", "-s", "demo", "--context", context, "-c", "$n + 1")
        assert (read.returncode, read.stdout) == (0, "42\n"), read.stderr

        deleted = run_cli(env, "contexts", "checkpoint", "delete", "answer", *where)
        assert deleted.returncode == 0, deleted.stderr
        empty = run_cli(env, "contexts", "checkpoint", "list", *where)
        assert empty.stdout == "no checkpoints\n"
        missing = run_cli(env, "contexts", "checkpoint", "restore", "answer", *where)
        assert missing.returncode == 4
        assert one_error_line(missing).startswith(
            f"error: Code context '{context}' has no checkpoint 'answer'"
        )
        bad = run_cli(env, "contexts", "checkpoint", "save", "../x", *where)
        assert bad.returncode == 2
        assert "A checkpoint name is 1-64 letters" in one_error_line(bad)
    finally:
        run_cli(env, "daemon", "stop")


def test_inspect_lists_names_and_writes_one_out(tmp_path: Path, perl_engine: None) -> None:
    env = cli_env(tmp_path)
    try:
        code = 'our $n = 41; our @list = (1, 2, 3); our $long = "ab" x 5000; 1'
        defined = run_cli(env, "run", "-s", "demo", "-l", "perl", "--json", "-c", code)
        context = json.loads(defined.stdout)["context"]["id"]
        where = ("-s", "demo", "--context", context[:8])

        listed = run_cli(env, "contexts", "inspect", *where)
        assert listed.returncode == 0, listed.stderr
        lines = listed.stdout.splitlines()
        assert [line.split()[:2] for line in lines] == [
            ["@list", "array"],
            ["$long", "string"],
            ["$n", "number"],
        ]
        assert lines[0].rstrip().endswith("[1,2,3]") and "len 3" in lines[0]
        assert "the state of run 1, read from a copy (the context did not run)" in listed.stderr

        as_json = json.loads(run_cli(env, "contexts", "inspect", *where, "--json").stdout)
        assert (as_json["contextId"], as_json["executionCount"], as_json["ranCode"]) == (
            context,
            1,
            False,
        )
        assert as_json["names"][2] == {
            "name": "$n",
            "type": "number",
            "repr": "41",
            "length": None,
            "bytes": None,
        }

        first = run_cli(env, "contexts", "inspect", *where, "--name", "$long")
        assert first.returncode == 0, first.stderr
        assert first.stdout == '"' + "ab" * 2047 + "a\n"
        assert "$long: string, characters 0-4096 of 10002" in first.stderr
        assert "more: --offset 4096" in first.stderr
        rest = run_cli(env, "contexts", "inspect", *where, "--name", "$long", "--offset", "8192")
        assert rest.stdout == "b" + "ab" * 904 + '"\n'
        assert "more:" not in rest.stderr

        unknown_name = run_cli(env, "contexts", "inspect", *where, "--name", "$nope")
        assert unknown_name.returncode == 4
        assert "no name '$nope' to inspect" in one_error_line(unknown_name)
        unknown = run_cli(env, "contexts", "inspect", "-s", "demo", "--context", "zz")
        assert unknown.returncode == 4
        assert one_error_line(unknown) == "error: Code context 'zz' not found in sandbox demo"
        after = run_cli(env, "run", "-s", "demo", "--context", context, "--json", "-c", "$n")
        assert json.loads(after.stdout)["executionCount"] == 2  # the inspections did not count
    finally:
        run_cli(env, "daemon", "stop")
