"""The command line's one error boundary: an expected failure becomes one `error:` line
that says what to do, and an exit code; never a traceback (unless `--debug`).

Exit codes: 0 ok, 1 guest error, limit or other failure, 2 usage or configuration,
3 backend unreachable or unusable (connection, TLS, auth, unreadable store),
4 not found (a file, code context, checkpoint or inspected name: sandboxes come into being
on first use).
"""

from __future__ import annotations

import os
import re
import sys
import traceback

from workbench.cli.common import (
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    MalformedAnswerError,
    global_options,
)
from workbench.cli.terminal import echo_untrusted

EXIT_CODES_EPILOG = """Exit codes:
  0  ok
  1  guest error or limit (or another failure)
  2  usage or configuration error
  3  backend unreachable or unusable (connection, TLS, auth, unreadable store)
  4  not found: a /workspace file, code context, checkpoint or inspected name
     (a sandbox comes into being on first use: only `transcript export` reports a
     missing one)"""

_NOT_FOUND_CODES = frozenset({"FILE_NOT_FOUND", "CONTEXT_NOT_FOUND"})
_CONTEXT_LIMIT = re.compile(r"Cannot create more than \d+ code contexts")
"""The backends' answer to a context past a sandbox's limit (400 VALIDATION_FAILED)."""
_FREE_A_CONTEXT = (
    "delete one with `sandbox-workbench contexts delete -s SANDBOX --context ID` "
    "(`contexts list -s SANDBOX` lists them)"
)


class CommandError(Exception):
    """A failure a command reports itself: `error: MESSAGE` and `exit_code`."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def describe(error: Exception) -> tuple[str, int]:
    """The one-line message and exit code of an exception that escaped a command."""
    # Imported here: these modules are only needed once something went wrong.
    from workbench.api import EnginePrepareError, SandboxError
    from workbench.config import ConfigError
    from workbench.profiles import BackendUnavailableError, UnknownProfileError

    if isinstance(error, CommandError):
        return str(error), error.exit_code
    if isinstance(error, SandboxError):
        return _describe_sandbox_error(error)
    if isinstance(error, UnknownProfileError | ConfigError):
        return str(error), EXIT_USAGE
    if isinstance(error, BackendUnavailableError | MalformedAnswerError) or _is_instance_of(
        error, "workbench.backends.daemon.location", "UnsafeLocationError"
    ):
        return str(error), EXIT_UNAVAILABLE
    if isinstance(error, EnginePrepareError) or _is_instance_of(
        error, "engines.language", "PrepareError"
    ):
        return f"the engine could not be prepared: {error}", EXIT_FAILED
    if _is_instance_of(error, "sqlite3", "DatabaseError"):
        return (
            f"the local store is unreadable ({error}); move it aside or use another --data-dir",
            EXIT_UNAVAILABLE,
        )
    if isinstance(error, OSError):
        where = f": {error.filename}" if error.filename else ""
        return f"{error.strerror or error}{where}", EXIT_FAILED
    return (
        f"unexpected {type(error).__name__}: {error} (a bug: run again with --debug and "
        "report the traceback)",
        EXIT_FAILED,
    )


def _is_instance_of(error: Exception, module: str, name: str) -> bool:
    """isinstance against a class of a module only if that module is already loaded (so
    reporting an error never imports wasmtime)."""
    loaded = sys.modules.get(module)
    kind = getattr(loaded, name, None)
    return isinstance(kind, type) and isinstance(error, kind)


def _chain(error: BaseException) -> list[BaseException]:
    """`error` and what it was raised from."""
    found: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in found:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def _describe_sandbox_error(error: Exception) -> tuple[str, int]:
    from workbench.api import SandboxError

    assert isinstance(error, SandboxError)
    if error.code == "CONNECTION_FAILED":
        return error.message, EXIT_UNAVAILABLE
    detail = f"{error.message} ({error.code}, HTTP {error.http_status})"
    if _CONTEXT_LIMIT.fullmatch(error.message):
        detail = f"{detail}: {_FREE_A_CONTEXT}"
    if error.http_status in (401, 403) and error.code in ("UNAUTHORIZED", "FORBIDDEN"):
        return f"{detail}: check the profile's token", EXIT_UNAVAILABLE
    if error.code in _NOT_FOUND_CODES or error.http_status == 404:
        return detail, EXIT_NOT_FOUND
    if 400 <= error.http_status < 500:
        return detail, EXIT_USAGE
    return detail, EXIT_FAILED


def report(error: Exception) -> int:
    """Print `error` (with its traceback under --debug) and return the exit code."""
    if isinstance(error, BrokenPipeError) and not global_options().debug:
        # The reader went away (`| head`) or stdout is closed (`>&-`): nothing to say, as
        # other tools; stdout goes to /dev/null so that Python's flush at exit does not
        # fail again.
        if sys.stdout is not None:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    message, code = describe(error)
    if sys.stderr is None:  # closed (`2>&-`): the exit code alone tells
        return code
    if global_options().debug:
        traceback.print_exception(error, file=sys.stderr)
        for cause in _chain(error):
            tail = getattr(cause, "log_tail", "")
            if tail:  # a failure in the daemon: its own traceback is in its log
                echo_untrusted(f"the local daemon's log:\n{tail}", err=True)
    echo_untrusted(f"error: {message}", err=True, one_line=True)  # it may quote a path
    return code
