"""`sandbox-workbench watch` through the real console script: what it may delete, that it
says where it deletes, `--prune`, hostile `.gitignore` lines and bad arguments."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = str(Path(sys.executable).parent / "sandbox-workbench")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SANDBOX_WORKBENCH_DATA_DIR": str(tmp_path / "data"),
        "SANDBOX_WORKBENCH_CONFIG_DIR": str(tmp_path / "config"),
    }


def workbench(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed


def sandbox_files(env: dict[str, str], sandbox: str) -> list[str]:
    listing = workbench(env, "files", "ls", sandbox, "--all", "--recursive", "--json")
    assert listing.returncode == 0, listing.stderr
    return sorted(info["relativePath"] for info in json.loads(listing.stdout))


def test_watch_deletes_only_what_it_uploaded_and_says_where(
    tmp_path: Path, env: dict[str, str]
) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    (folder / "b.txt").write_text("b")
    (tmp_path / "extra.txt").write_text("put by hand")
    assert workbench(env, "files", "put", "proj", str(tmp_path / "extra.txt")).returncode == 0

    first = workbench(env, "watch", str(folder), "--once")
    assert first.returncode == 0, first.stderr
    assert sandbox_files(env, "proj") == ["a.txt", "b.txt", "extra.txt"]

    (folder / "a.txt").unlink()
    second = workbench(env, "watch", str(folder), "--once", "--json")
    assert second.returncode == 0, second.stderr
    assert sandbox_files(env, "proj") == ["b.txt", "extra.txt"]
    lines = [json.loads(line) for line in second.stdout.splitlines()]
    assert [line["event"] for line in lines] == ["synced"] and lines[0]["sync"]["deleted"] == 1
    announced = [json.loads(line) for line in second.stderr.splitlines() if "backend" in line]
    assert announced == [
        {
            "event": "backend",
            "profile": "local",
            "backend": f"local ({tmp_path / 'data'})",
            "sandbox": "proj",
            "dest": "/workspace",
        }
    ]
    (state,) = (tmp_path / "data" / "sync-state").iterdir()
    assert stat.S_IMODE(state.stat().st_mode) == 0o600

    pruned = workbench(env, "watch", str(folder), "--once", "--prune")
    assert pruned.returncode == 0, pruned.stderr
    assert f"on profile local: local ({tmp_path / 'data'})" in pruned.stderr
    assert sandbox_files(env, "proj") == ["b.txt"]


def test_watch_honours_tricky_gitignore_lines_and_secret_defaults(
    tmp_path: Path, env: dict[str, str]
) -> None:
    folder = tmp_path / "tricky"
    folder.mkdir()
    (folder / ".gitignore").write_text("[]a]\n[]x]*\n")
    for name in ("]", "a", "x1", "keep.txt", ".env", "server.pem", "id_ed25519"):
        (folder / name).write_text(name)
    (folder / ".ssh").mkdir()
    (folder / ".ssh" / "config").write_text("Host *")
    completed = workbench(env, "watch", str(folder), "--once")
    assert completed.returncode == 0, completed.stderr
    assert sandbox_files(env, "tricky") == [".gitignore", "keep.txt"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dest", "/etc"], "dest must be /workspace or under it"),
        (["--dest", "/workspace/../etc"], "dest must be /workspace or under it"),
        (["--run", "../outside.py"], "would leave its root"),
    ],
)
def test_watch_rejects_paths_outside_their_roots(
    tmp_path: Path, env: dict[str, str], args: list[str], message: str
) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    (tmp_path / "outside.py").write_text("print('outside')\n")
    completed = workbench(env, "watch", str(folder), "--once", *args)
    assert completed.returncode == 2
    assert message in completed.stderr
