"""Options and helpers shared by the headless commands.

Light on purpose: `--help`, `locate` and `profiles` import this without loading a backend
or an engine (the API and backends are imported inside the functions that need them).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import click

from workbench.cli.completion import complete_profiles, complete_sandbox_ids
from workbench.cli.terminal import echo_untrusted
from workbench.config import DEFAULT_TIMEOUT_S, LOCAL_PROFILE
from workbench.profiles import NO_DAEMON_ENV as NO_DAEMON_ENV

if TYPE_CHECKING:
    import asyncio

    from workbench.api import Backend, CodeContext, SandboxClient

P = ParamSpec("P")
T = TypeVar("T")
Command = TypeVar("Command", bound=Callable[..., Any])
"""A click command function, as option decorators take and return it."""

EXIT_OK = 0
EXIT_FAILED = 1
"""The guest raised, hit a limit, or the command failed otherwise."""
EXIT_USAGE = 2
"""Bad arguments, configuration or environment variable."""
EXIT_UNAVAILABLE = 3
"""The backend cannot be reached or used: connection, TLS, auth, unreadable store."""
EXIT_NOT_FOUND = 4
"""A /workspace file, code context, checkpoint or inspected name does not exist (a sandbox
comes into being on first use: only `transcript export` reports a missing one)."""

PROFILE_ENV = "SANDBOX_WORKBENCH_PROFILE"
DEBUG_ENV = "SANDBOX_WORKBENCH_DEBUG"


@dataclass(frozen=True)
class GlobalOptions:
    """The flags given before the subcommand (`sandbox-workbench -p dev run …`)."""

    profile: str | None = None
    data_dir: Path | None = None
    debug: bool = False
    quiet: bool = False
    no_daemon: bool = False


def global_options() -> GlobalOptions:
    """The group-level flags of the running invocation (defaults outside one)."""
    context = click.get_current_context(silent=True)
    found = None if context is None else context.find_root().obj
    if isinstance(found, GlobalOptions):
        return found
    return GlobalOptions(debug=os.environ.get(DEBUG_ENV, "") not in ("", "0"))


def note(message: str) -> None:
    """A note or progress line on stderr, unless `--quiet`."""
    if not global_options().quiet:
        echo_untrusted(message, err=True)


def _merge(flag: str, before: Any, after: Any, same: Callable[[Any, Any], bool]) -> Any:
    """The value of a flag that may be given before and after the subcommand."""
    if before is not None and after is not None and not same(before, after):
        raise click.UsageError(
            f"{flag} is given twice with different values ({before} before the command, "
            f"{after} after it); give it once"
        )
    return after if after is not None else before


def _same_directory(first: Path, second: Path) -> bool:
    return first.expanduser().absolute() == second.expanduser().absolute()


def resolve_data_dir(data_dir: Path | None) -> Path | None:
    """The subcommand's `--data-dir` merged with the group's (None: the default)."""
    merged: Path | None = _merge("--data-dir", global_options().data_dir, data_dir, _same_directory)
    return merged


def resolve_profile(profile: str | None) -> str:
    """The subcommand's `--profile` merged with the group's, else $SANDBOX_WORKBENCH_PROFILE,
    else `local`."""
    merged = _merge("--profile", global_options().profile, profile, str.__eq__)
    return str(merged or os.environ.get(PROFILE_ENV) or LOCAL_PROFILE)


DATA_DIR_HELP = "Local backend store (default: $SANDBOX_WORKBENCH_DATA_DIR or the user data dir)."


def data_dir_option(command: Callable[P, T]) -> Callable[P, T]:
    """`--data-dir`, merged with the one given before the subcommand."""

    @functools.wraps(command)
    def merged(*args: P.args, **kwargs: P.kwargs) -> T:
        kwargs["data_dir"] = resolve_data_dir(kwargs.get("data_dir"))  # type: ignore[arg-type]
        return command(*args, **kwargs)

    return click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help=DATA_DIR_HELP,
    )(merged)


def backend_options(command: Callable[P, T]) -> Callable[P, T]:
    """`--profile` and `--data-dir`, accepted by every command that talks to a backend,
    before or after the subcommand (the command receives the merged values)."""

    @functools.wraps(command)
    def merged(*args: P.args, **kwargs: P.kwargs) -> T:
        kwargs["profile"] = resolve_profile(kwargs.get("profile"))  # type: ignore[arg-type]
        return command(*args, **kwargs)

    return click.option(
        "--profile",
        "-p",
        default=None,
        callback=non_empty,  # `-p "$PROD"` with PROD unset acted on the local store (QA)
        shell_complete=complete_profiles,
        help=f"Backend profile: `local` (embedded, the default) or a configured remote "
        f"gateway (default: ${PROFILE_ENV} or local).",
    )(data_dir_option(merged))


def _seconds(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    from workbench.config import parse_timeout

    try:
        return parse_timeout(value, "--timeout")
    except ValueError as error:
        raise click.UsageError(str(error)) from None


TIMEOUT_HELP = (
    "Wall-clock limit of an execution in seconds (default: $SANDBOX_WORKBENCH_TIMEOUT_S, "
    f"else {DEFAULT_TIMEOUT_S:g} on the local backend and 120 on a remote profile). Local "
    "backend: the engine stops the guest then. Remote profile: how long to wait for the "
    "answer; the gateway keeps its own limit."
)
"""120: the remote backend's read timeout (`workbench.backends.remote.DEFAULT_TIMEOUT`,
which --help does not import: it loads httpx; a test keeps the two equal)."""


SERVE_TIMEOUT_HELP = (
    "Wall-clock limit of an execution whose request names none, in seconds (default: "
    f"$SANDBOX_WORKBENCH_TIMEOUT_S, else {DEFAULT_TIMEOUT_S:g}). In front of a running "
    "daemon, the daemon's limit applies."
)


def timeout_option_with(help_text: str) -> Callable[[Command], Command]:
    """`timeout_option` with its own help (`serve`'s)."""
    return click.option(
        "--timeout", default=None, metavar="SECONDS", callback=_seconds, help=help_text
    )


def timeout_option(command: Callable[P, T]) -> Callable[P, T]:
    """`--timeout SECONDS` (None when not given: $SANDBOX_WORKBENCH_TIMEOUT_S or the
    backend's default applies, see `open_profile_backend`)."""
    return timeout_option_with(TIMEOUT_HELP)(command)


def non_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Callback of an option whose empty value would read as absent (`--context ''`): a
    usage error naming the option."""
    if value == "":
        raise click.BadParameter("must not be empty")
    return value


def path_value(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Callback of a path argument: an empty one is a usage error (QA: `files put demo
    a.txt ''` wrote /workspace/a.txt, `files cat demo ''` asked the backend)."""
    if value == "" and not ctx.resilient_parsing:
        raise click.BadParameter("must not be empty")
    return value


def sandbox_id_value(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Callback of a sandbox id (an argument or `-s`): one the backends would refuse is a
    usage error with the validator's message (spec 8.1) before any backend opens (a local
    command would otherwise start the daemon only to be refused)."""
    if value is None or ctx.resilient_parsing:
        return value
    if value == "":
        raise click.BadParameter("must not be empty")
    from workbench.api import neutralise, sandbox_id_error  # the API waits for a command

    problem = sandbox_id_error(value)
    if problem is not None:  # it quotes the id, which may hold escape sequences
        raise click.BadParameter(neutralise(problem))
    return value


def sandbox_option(command: Command) -> Command:
    """`-s/--sandbox ID` (required), for the commands that act in one sandbox."""
    return click.option(
        "--sandbox",
        "-s",
        "sandbox_id",
        required=True,
        callback=sandbox_id_value,
        shell_complete=complete_sandbox_ids,
        help="The sandbox's id.",
    )(command)


def parse_env(pairs: tuple[str, ...], param_hint: str = "--env") -> dict[str, str]:
    """`KEY=VALUE` arguments as env vars (the backend checks the keys); anything else is a
    usage error naming `param_hint`."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint=param_hint)
        env[key] = value
    return env


def read_source(source: str, limit: int) -> bytes:
    """At most `limit + 1` bytes of the local file `source`, or of stdin for `-` (more
    than `limit` means too large), so that `/dev/zero` or a huge file never fills
    memory; a file that cannot be read is a usage error."""
    try:
        with _stop_signals_exit():
            if source == "-":
                if sys.stdin is None:  # closed: an unexpected AttributeError said so (review)
                    raise click.UsageError("cannot read -: stdin is closed")
                return sys.stdin.buffer.read(limit + 1)
            with open(source, "rb") as stream:
                return stream.read(limit + 1)
    except OSError as error:
        raise click.UsageError(f"cannot read {source}: {error.strerror or error}") from error


@contextlib.contextmanager
def _stop_signals_exit() -> Iterator[None]:
    """In the block, SIGTERM and SIGHUP end the command at once (exit 128 + the signal),
    and Ctrl+C raises where the read is: a read that blocks (a FIFO no one writes to)
    blocks the event loop too, whose own handlers would run only after it (QA: `timeout 5
    … files put demo fifo` kept waiting). Nothing is made before a command's source is
    read, so nothing is left."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {signum: signal.signal(signum, stop) for signum in _STOP_SIGNALS}
    try:
        with _ctrl_c_raises():
            yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def open_backend(profile: str, data_dir: Path | None, timeout: float | None = None) -> Backend:
    """The backend a profile names (the local one through its daemon unless
    `--no-daemon`)."""
    from workbench.profiles import open_profile_backend

    if profile == LOCAL_PROFILE:
        warn_about_config()
    embedded = True if global_options().no_daemon else None
    with _ctrl_c_raises():  # it may wait up to a minute for a daemon to start
        return open_profile_backend(
            profile, data_dir=data_dir, timeout=timeout, embedded=embedded, note=note
        )


@contextlib.contextmanager
def _ctrl_c_raises() -> Iterator[None]:
    """In the block, Ctrl+C raises KeyboardInterrupt where the main thread is, as it does
    outside an event loop: `asyncio.run` only cancels its task, which a call that blocks
    the loop (waiting for a daemon to start) would not see until it returned. An ignored
    SIGINT stays ignored, as POSIX has it for background jobs."""
    previous = signal.getsignal(signal.SIGINT)
    if (
        threading.current_thread() is not threading.main_thread()
        or previous in (signal.SIG_IGN, signal.SIG_DFL)
        or previous is None
    ):
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def warn_about_config() -> None:
    """The local profile needs no config file, so one that cannot be read would go
    unnoticed: say so once on stderr, naming it (a remote profile fails on it instead)."""
    from workbench.config import Config, ConfigError

    try:
        Config.load()
    except ConfigError as error:
        echo_untrusted(f"warning: {error} (the local profile goes on without it)", err=True)


_WHOLE_CONTEXT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""A context id as sandboxes mint them (a random UUID, spec 2.4), not a prefix of one."""


LISTING_NOTE_SECONDS = 0.5
"""How long a request of a command may take before the command says it waits (an
answered listing takes milliseconds; one behind another client's run waits for it)."""


def busy(sandbox: SandboxClient) -> str:
    """The note of a command's request that waits for the sandbox (`said_if_slow`)."""
    return (
        f"note: sandbox {sandbox.id} is busy with another client's run, which this command "
        "waits for, or the backend slow to answer or not answering (Ctrl+C gives up)"
    )


async def said_if_slow(request: Awaitable[T], waiting_note: str) -> T:
    """What `request` answers; `waiting_note` is said first (unless --quiet) once it has
    taken `LISTING_NOTE_SECONDS`: silent, a command behind another client's run looked
    hung (QA)."""
    import asyncio  # here: a command that sends no request does not import it

    answer = asyncio.ensure_future(request)
    try:
        done, _ = await asyncio.wait({answer}, timeout=LISTING_NOTE_SECONDS)
        if not done and not global_options().quiet:
            echo_untrusted(waiting_note, err=True, fg="yellow")
        return await answer
    finally:
        answer.cancel()  # given up (Ctrl+C): its request goes too


async def full_context_id(sandbox: SandboxClient, given: str) -> str:
    """The id of the sandbox's context that `given` names: the id itself or a unique
    prefix of one (as git takes short hashes; the TUI shows 8 characters). An ambiguous
    prefix is a usage error naming the matches; no match is left to the backend, which
    reports the context as not found. A whole id is taken as it is, with no listing: a
    command's own request then keeps its place in the sandbox's queue (a listing waits
    behind a running execution, and commands of other clients that come meanwhile would
    go before the command's request)."""
    if _WHOLE_CONTEXT_ID.fullmatch(given):
        return given
    found = await find_context(sandbox, given, whole_id_lists=False)
    return given if found is None else found.id


async def find_context(
    sandbox: SandboxClient, given: str, *, whole_id_lists: bool = True
) -> CodeContext | None:
    """The sandbox's context that `given` names, as `full_context_id` takes it (None: no
    context is named so). A listing that waits behind another run says so: silent, the
    command looked hung (QA); `whole_id_lists`: the caller lists for a whole id too, so
    the note does not say a whole id would spare the wait (QA)."""
    contexts = await said_if_slow(
        sandbox.interpreter.list_code_contexts(),
        f"note: sandbox {sandbox.id} has not listed its contexts yet (to find {given}): it "
        "may be busy with another client's run, which this command waits for, or the "
        "backend slow to answer or not answering (Ctrl+C gives up"
        + (")" if whole_id_lists else "; a whole context id needs no listing)"),
    )
    for context in contexts:
        if context.id == given:
            return context
    matches = [context for context in contexts if context.id.startswith(given)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        from workbench.cli.errors import CommandError  # errors imports this module

        named = ", ".join(f"{context.id} ({context.binding})" for context in matches)
        raise CommandError(
            f"--context {given} matches {len(matches)} contexts: {named}", EXIT_USAGE
        )
    return None


_STOP_SIGNALS = [
    signum for signum in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if signum is not None
]
"""Signals that end an async command through its cleanups (exit 128 + the signal)."""


def _stop(task: asyncio.Task[Any] | None, signum: int, stopped_by: list[int]) -> None:
    stopped_by.append(signum)
    if task is not None:
        task.cancel()


def run_async(
    function: Callable[P, Coroutine[Any, Any, int | None]],
) -> Callable[P, None]:
    """Run an async command body and exit with the code it returns; failures go to the
    CLI's error boundary (`workbench.cli.errors`)."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        import asyncio  # here: commands that need no event loop start faster

        stopped_by: list[int] = []

        async def body() -> int | None:
            # SIGTERM and SIGHUP (a closed terminal) end the command as Ctrl+C does: its
            # task is cancelled, so what it made for itself (a scratch sandbox, a fresh
            # context) is removed on the way out; before, the process ended where it
            # stood and left them behind.
            task = asyncio.current_task()
            loop = asyncio.get_running_loop()
            for signum in _STOP_SIGNALS:
                with contextlib.suppress(NotImplementedError):  # no signal handlers here
                    loop.add_signal_handler(signum, _stop, task, signum, stopped_by)
            return await function(*args, **kwargs)

        try:
            code = asyncio.run(body())
        except KeyboardInterrupt:
            sys.exit(130)
        except asyncio.CancelledError:  # only those signals cancel the command's own task
            sys.exit(128 + (stopped_by[0] if stopped_by else signal.SIGTERM))
        sys.exit(code or EXIT_OK)

    return wrapper


class MalformedAnswerError(Exception):
    """A remote gateway answered with JSON of a shape this workbench does not understand."""


async def with_backend(
    profile: str,
    data_dir: Path | None,
    body: Callable[[Backend], Awaitable[T]],
    *,
    timeout: float | None = None,
) -> T:
    """Open the profile's backend, run `body` with it, close it."""
    from workbench.api import SandboxError  # the API waits for a command
    from workbench.protocol.http import UnreadableAnswer

    backend = open_backend(profile, data_dir, timeout)
    malformed = (KeyError, TypeError, AttributeError, IndexError, ValueError)
    try:
        return await body(backend)
    except (SandboxError, *malformed) as error:
        # The client reads an answer of the wrong shape as an INTERNAL_ERROR caused by
        # what was wrong; a remote gateway is then named, with that cause.
        cause: BaseException | None = error
        if isinstance(error, SandboxError):  # only the client's own INTERNAL_ERROR is unwrapped
            cause = error.__cause__ if error.code == "INTERNAL_ERROR" else None
        if not isinstance(cause, malformed):
            raise
        if backend.engines is not None:  # the local backend: a bug, not a bad answer
            if isinstance(cause, UnreadableAnswer):
                raise  # the answer's own error says what it was
            raise cause from None
        if isinstance(error, SandboxError) and error.http_status == 401:
            raise MalformedAnswerError(
                f"the gateway at {backend.description} refused the request ({cause}): "
                "check the profile's token"
            ) from error
        reason = f"{cause}"
        if not isinstance(cause, UnreadableAnswer):
            reason = f"{type(cause).__name__}: {cause}"
        raise MalformedAnswerError(
            f"the gateway at {backend.description} sent an answer this workbench does not "
            f"understand ({reason}); is the profile's URL a sandbox-workbench gateway of a "
            "matching version?"
        ) from error
    finally:
        await backend.aclose()


def announce_destructive(action: str, backend: Backend) -> None:
    """Say on stderr, before acting, which backend a destructive command changes (even
    with --quiet: it is what keeps `-p` mistakes from deleting the wrong thing)."""
    from workbench.api.display import describe_backend  # the API waits for a command

    echo_untrusted(f"{action} on {describe_backend(backend)}", err=True, one_line=True)


def confirm(question: str) -> None:
    """Ask `question` before a destructive change; no aborts the command (`Aborted!`,
    exit 1). The question names the backend: `announce_destructive` comes after it."""
    from workbench.api import neutralise  # the prompt may quote a server's ids

    click.confirm(neutralise(question), abort=True)
