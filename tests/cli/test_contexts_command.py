"""`sandbox-workbench contexts list | fork` through the console script and the local
daemon."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli import cli_env, one_error_line, run_cli


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
        assert line.startswith(f"{origin}  PERL  perl  /workspace  1 runs  snapshot ")

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
