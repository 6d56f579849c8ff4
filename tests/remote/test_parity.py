"""The same script of API calls against the local backend in-process and against the
remote backend over a real `serve` process gives identical answers: statuses, error
classes, codes, messages and JSON (ids and timestamps masked)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_engine
from tests.serve_process import ServeProcess, serve_process
from workbench.api import Backend, SandboxError
from workbench.backends.local import open_local_backend
from workbench.backends.remote import open_remote_backend

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
VOLATILE = {
    "durationMs",
    "expiresAt",
    "expires_at",
    "takenAt",
    "snapshotMs",
    "fuelConsumed",
    "memoryBytes",
    "cpuMs",
    "timestamp",
    "modifiedAt",
    "modified_at",
}


def normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "<v>" if k in VOLATILE else normalize(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [normalize(item) for item in value]
    if isinstance(value, str):
        return UUID.sub("<uuid>", ISO.sub("<iso>", value))
    return value


Step = Callable[[Backend], Awaitable[Any]]


async def outcome(step: Step, backend: Backend) -> Any:
    try:
        answer = await step(backend)
    except SandboxError as error:
        return {"raised": type(error).__name__, "error": normalize(error.to_json())}
    if hasattr(answer, "to_json"):
        answer = answer.to_json()
    elif dataclasses.is_dataclass(answer) and not isinstance(answer, type):
        answer = dataclasses.asdict(answer)
    elif isinstance(answer, list):
        answer = [item.to_json() for item in answer]
    return normalize(answer)


SANDBOX = "parity"


def script() -> list[tuple[str, Step]]:
    def sandbox(backend: Backend) -> Any:
        return backend.sandbox(SANDBOX)

    return [
        ("info of a new sandbox", lambda b: sandbox(b).get_info()),
        ("env", lambda b: sandbox(b).set_env_vars({"GREETING": "hola", "GONE": None})),
        ("bad env key", lambda b: sandbox(b).set_env_vars({"1BAD": "x"})),
        ("write", lambda b: sandbox(b).write_file("notes/a.txt", "hello")),
        ("mkdir", lambda b: sandbox(b).mkdir("notes/deep/er", recursive=True)),
        ("read missing", lambda b: sandbox(b).read_file("nope.txt")),
        ("escape", lambda b: sandbox(b).exists("../etc/passwd")),
        ("binary", lambda b: sandbox(b).write_file("blob.bin", bytes(range(256)))),
        ("read binary", lambda b: sandbox(b).read_file("blob.bin", encoding="base64")),
        ("list", lambda b: sandbox(b).list_files(recursive=True)),
        ("too large", lambda b: sandbox(b).write_file("big.bin", b"x" * (1024 * 1024 + 1))),
        ("no context or binding", lambda b: sandbox(b).interpreter.run_code("1")),
        ("unknown binding", lambda b: sandbox(b).interpreter.run_code("1", binding="NOPE")),
        ("unknown context", lambda b: sandbox(b).interpreter.run_code("1", context="nope")),
        (
            "perl run",
            lambda b: sandbox(b).interpreter.run_code(
                'print "hi\\n"; open(my $f, "<", "notes/a.txt"); [scalar <$f>, $ENV{GREETING}]',
                binding="PERL",
            ),
        ),
        ("perl error", lambda b: sandbox(b).interpreter.run_code('die "boom\\n"', binding="PERL")),
        ("contexts", lambda b: sandbox(b).interpreter.list_code_contexts()),
        ("stateless", lambda b: b.run_code("6*7", env_vars={"A": "b"}, binding="PERL")),
        ("stateless blank", lambda b: b.run_code("   ", binding="PERL")),
        ("rename onto dir", lambda b: sandbox(b).rename_file("notes/a.txt", "notes/deep")),
        ("delete dir", lambda b: sandbox(b).delete_file("notes")),
        ("info", lambda b: sandbox(b).get_info()),
        ("destroy", lambda b: sandbox(b).destroy()),
    ]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with serve_process(
        tmp_path_factory.mktemp("parity"), env={"SANDBOX_WORKBENCH_IDLE_TTL_MS": "86400000"}
    ) as process:
        yield process


async def test_local_and_remote_answer_identically(server: ServeProcess, tmp_path: Path) -> None:
    require_engine("perl")
    local = open_local_backend(tmp_path / "local", ttl_ms=86_400_000, embedded=True)
    remote = open_remote_backend("parity", server.url, server.token)
    try:
        for name, step in script():
            from_local = await outcome(step, local)
            from_remote = await outcome(step, remote)
            assert from_local == from_remote, name
    finally:
        await local.aclose()
        await remote.aclose()
