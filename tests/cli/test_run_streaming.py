"""`run` in a context prints the guest's output as it is written (through the daemon's
streamed answer), each line once; `--json` keeps the one JSON document."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from tests.cli import SCRIPT, cli_env, run_cli
from tests.conftest import require_engine
from tests.daemon import wait_for_a_run
from workbench.backends.local.sandbox_object import SandboxObject

CODE = "import time\nprint('first')\ntime.sleep(2)\nprint('second')"


@contextlib.contextmanager
def another_clients_run(env: dict[str, str], context: str) -> Iterator[subprocess.Popen[bytes]]:
    """A run of two seconds in sandbox `box`'s `context` by another CLI process, going on
    while the block runs; the block's end waits for it to end."""
    code = "import time; time.sleep(2)"
    other = subprocess.Popen(
        [str(SCRIPT), "run", "-s", "box", "--context", context, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        wait_for_a_run(env)
        yield other
    finally:
        other.communicate(timeout=60)


def test_run_prints_a_contexts_output_as_it_comes(tmp_path: Path) -> None:
    require_engine("python")
    env = cli_env(tmp_path)
    assert run_cli(env, "run", "-s", "box", "-l", "python", "-c", "1").returncode == 0
    process = subprocess.Popen(
        [str(SCRIPT), "run", "-s", "box", "-l", "python", "-c", CODE],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        first_at = time.monotonic()
        rest, errors = process.communicate(timeout=60)
        ended_at = time.monotonic()
    finally:
        process.kill()
        process.wait()
    assert (first, rest, errors) == ("first\n", "second\n", "")
    # Measured from the line to the end, so a slow start (a loaded machine) cannot fail it.
    assert ended_at - first_at > 1.0, "the first line waited for the end of the run"
    assert process.returncode == 0
    as_json = run_cli(env, "run", "-s", "box", "-l", "python", "-c", CODE, "--json")
    assert json.loads(as_json.stdout)["logs"]["stdout"] == ["first", "second"]


def test_a_run_waiting_behind_another_clients_says_so(tmp_path: Path) -> None:
    """QA: `run --context` into a context busy with another client's run waited 8 s (once
    24.7 s) with nothing printed. The daemon tells a streamed run that waits its turn, and
    the command notes it on stderr (not under `-q`; under `--json` too, on stderr)."""
    require_engine("python")
    env = cli_env(tmp_path)
    made = run_cli(env, "run", "-s", "box", "-l", "python", "--json", "-c", "x = 6")
    context = json.loads(made.stdout)["context"]["id"]
    waiting = "note: sandbox box is busy with another client's run; this run waits"
    # A prefix of the id is found by a listing, which waits behind the run: said too.
    listing = "note: sandbox box has not listed its contexts yet (to find "
    for flags, said in (((), True), (("--json",), True), (("-q",), False), (("prefix",), True)):
        given = context[:8] if flags == ("prefix",) else context
        with another_clients_run(env, context) as other:
            quiet = flags == ("-q",)
            command = [*flags, "run"] if quiet else ["run", *flags]
            if flags == ("prefix",):
                command = ["run"]
            queued = run_cli(env, *command, "-s", "box", "--context", given, "-c", "x * 7")
        assert queued.returncode == 0, queued.stderr
        note = listing if flags == ("prefix",) else waiting
        assert (note in queued.stderr) is said, queued.stderr
        assert (listing in queued.stderr) is (flags == ("prefix",)), queued.stderr
        assert ("a whole context id needs no listing" in queued.stderr) is (flags == ("prefix",))
        assert "42" in queued.stdout
        assert other.returncode == 0


def test_a_listing_a_whole_id_needs_too_does_not_say_it_would_not(tmp_path: Path) -> None:
    """`contexts delete` lists the contexts for a whole id too: its note while the listing
    waited said a whole id needs no listing, when one was given (QA)."""
    require_engine("python")
    env = cli_env(tmp_path)
    made = run_cli(env, "run", "-s", "box", "-l", "python", "--json", "-c", "x = 6")
    context = json.loads(made.stdout)["context"]["id"]
    with another_clients_run(env, context):
        deleted = run_cli(env, "contexts", "delete", "-s", "box", "--context", context, "-y")
    assert deleted.returncode == 0, deleted.stderr
    assert "has not listed its contexts yet" in deleted.stderr
    assert "needs no listing" not in deleted.stderr


def test_commands_behind_another_client_s_run_say_they_wait(tmp_path: Path) -> None:
    """`contexts checkpoint save` and `restore` with a whole id waited for another
    client's run without a word (QA); `run` and the listing said so."""
    require_engine("python")
    env = cli_env(tmp_path)
    made = run_cli(env, "run", "-s", "box", "-l", "python", "--json", "-c", "x = 6")
    context = json.loads(made.stdout)["context"]["id"]
    checkpoint = ("contexts", "checkpoint")
    saved = run_cli(env, *checkpoint, "save", "six", "-s", "box", "--context", context)
    assert saved.returncode == 0, saved.stderr
    waiting = "note: sandbox box is busy with another client's run, which this command waits"
    commands = [
        (*checkpoint, "save", "six", "-s", "box", "--context", context),
        (*checkpoint, "restore", "six", "-s", "box", "--context", context),
        # These waited without a word too (found in review).
        ("contexts", "fork", "-s", "box", "--context", context),
        ("contexts", "create", "-s", "box", "-l", "python"),
        ("sandboxes", "info", "box"),
        ("contexts", "list", "-s", "box"),
        ("transcript", "export", "-s", "box", "--context", context, "-o", "-"),
        ("sandboxes", "env", "box"),
    ]
    for command in commands:
        with another_clients_run(env, context):
            done = run_cli(env, *command)
        assert done.returncode == 0, done.stderr
        assert waiting in done.stderr, (command, done.stderr)
    quick = run_cli(env, *checkpoint, "list", "-s", "box", "--context", context)
    assert quick.returncode == 0 and "busy" not in quick.stderr, quick.stderr


async def test_a_request_arriving_as_the_turn_is_handed_on_is_told_it_waits() -> None:
    """The notice was armed only while the queue looked held: a request arriving just as
    one turn ended, before the next waiter took it, saw it free and then waited through
    that waiter's whole run in silence (found by review)."""

    class Queue:  # what `SandboxObject.turn` uses of the sandbox
        def __init__(self) -> None:
            self._queue = asyncio.Lock()

        def expire_if_due(self) -> bool:
            return False

    sandbox = Queue()
    told: list[str] = []
    turn = SandboxObject.turn

    async def holds(name: str, seconds: float) -> None:
        async with turn(sandbox, lambda waits: told.append(f"{name} {waits}")):  # type: ignore[arg-type]
            await asyncio.sleep(seconds)

    async def first() -> asyncio.Future[None]:
        async with turn(sandbox, lambda waits: told.append(f"first {waits}")):  # type: ignore[arg-type]
            await asyncio.sleep(0.2)
            # Arrives in the same step as the turn ends: it runs before the woken second.
            return asyncio.ensure_future(holds("late", 0))

    started = asyncio.ensure_future(first())
    await asyncio.sleep(0.05)
    second = asyncio.ensure_future(holds("second", 0.8))
    late = await started
    await asyncio.gather(second, late)
    assert told == ["late True", "late False"]  # it waits, then its turn comes
