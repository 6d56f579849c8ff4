"""Guest driver of the Python engine (runs inside CPython 3.14 built by componentize-py).

The component exports `run(request: list<u8>) -> list<u8>`: a serialized `ExecuteRequest`
in, a serialized `ExecuteResponse` out (engines/proto/envelope.proto), encoded by the tiny
protobuf codec below. It never raises into the host for guest-level failures.

componentize-py pre-initializes this module at build time (Wizer snapshot) and the stdlib
directory is not mounted at run time, so only modules imported during the build exist in
the component: `_preload_stdlib` imports the whole usable stdlib for that reason.

Keep this file valid for Python 3.11 syntax too (it is packaged with the host package).
"""

import ast
import builtins
import io
import json
import os
import random
import sys
import time
import types

import wit_world

# --- build time: import the usable stdlib -------------------------------------------------

# Interactive, GUI, packaging or side-effect modules that are useless (or harmful) here.
_SKIP = frozenset(
    {
        "__hello__",
        "__phello__",
        "antigravity",
        "this",
        "idlelib",
        "tkinter",
        "turtle",
        "turtledemo",
        "pydoc",
        "pydoc_data",
        "ensurepip",
        "venv",
        "lib2to3",
        "msilib",
        "winreg",
        "winsound",
        "msvcrt",
        "_winapi",
        "nt",
    }
)
# Submodules that `import <package>` alone does not load.
_SUBMODULES = (
    "collections.abc",
    "concurrent.futures",
    "email.charset",
    "email.encoders",
    "email.generator",
    "email.header",
    "email.headerregistry",
    "email.message",
    "email.mime.application",
    "email.mime.base",
    "email.mime.multipart",
    "email.mime.text",
    "email.parser",
    "email.policy",
    "email.utils",
    "encodings.idna",
    "encodings.latin_1",
    "encodings.ascii",
    "encodings.utf_16",
    "encodings.utf_32",
    "encodings.cp1252",
    "encodings.unicode_escape",
    "encodings.raw_unicode_escape",
    "encodings.punycode",
    "html.entities",
    "html.parser",
    "http.client",
    "http.cookies",
    "http.cookiejar",
    "importlib.abc",
    "importlib.machinery",
    "importlib.metadata",
    "importlib.resources",
    "importlib.util",
    "json.decoder",
    "json.encoder",
    "logging.config",
    "logging.handlers",
    "multiprocessing.shared_memory",
    "os.path",
    "unittest.mock",
    "urllib.error",
    "urllib.parse",
    "urllib.request",
    "urllib.response",
    "urllib.robotparser",
    "wsgiref.handlers",
    "wsgiref.simple_server",
    "wsgiref.util",
    "xml.dom.minidom",
    "xml.dom.pulldom",
    "xml.etree.ElementTree",
    "xml.parsers.expat",
    "xml.sax.handler",
    "xml.sax.saxutils",
    "xmlrpc.client",
    "zoneinfo._common",
    "zoneinfo._tzpath",
    "compression.zlib",
    "compression.gzip",
    "compression.zstd",
    "string.templatelib",
    "annotationlib",
    "asyncio.base_events",
    "dbm.dumb",
    "dbm.sqlite3",
    "sqlite3.dbapi2",
    "ctypes.util",
)


def _preload_stdlib() -> list[str]:
    """Import every public stdlib module that imports; return the ones that did."""
    loaded = []
    names = [n for n in sorted(sys.stdlib_module_names) if n not in _SKIP]
    for name in [*names, *_SUBMODULES]:
        try:
            __import__(name)
        except BaseException:  # noqa: BLE001 - absent on WASI (ssl, ctypes, ...) or refuses
            continue
        loaded.append(name)
    return loaded


def _no_self_pipe(loop):
    loop._ssock = loop._csock = None


def _keep_no_self_pipe(loop):
    pass


def _patch_asyncio():
    """Let asyncio's event loop start without a self-pipe.

    The selector loop creates a socketpair to be woken from other threads or signal
    handlers; neither exists under WASI, and socket creation is denied (no network), so
    `asyncio.run` would fail with PermissionError. `_write_to_self` already tolerates None.
    """
    try:
        from asyncio import selector_events
    except ImportError:
        return
    selector_events.BaseSelectorEventLoop._make_self_pipe = _no_self_pipe
    selector_events.BaseSelectorEventLoop._close_self_pipe = _keep_no_self_pipe


_REPLACED_STDIO = []
_STREAM_SECONDS = 0.25
"""While a run lasts, completed lines reach the host at least this often."""


class _StreamingText(io.TextIOWrapper):
    """Buffered text that hands completed lines to the host while a run lasts: at a
    newline once `_STREAM_SECONDS` passed since it last did (and before a sleep), so a
    cell that prints as it goes is seen as it goes, in a few writes (spec 9.2 counts them)."""

    flushed_at = 0.0

    def write(self, text):
        written = super().write(text)
        if "\n" in text:
            now = time.monotonic()
            if now - self.flushed_at >= _STREAM_SECONDS:
                self.flushed_at = now
                self.flush()
        return written


def _flushing_sleep(seconds, _sleep=time.sleep):
    """`time.sleep` after handing what was printed to the host."""
    _flush()
    _sleep(seconds)


def _buffered_stdio():
    """Put a BufferedWriter between sys.stdout/stderr and their FileIO.

    componentize-py sets them up unbuffered (TextIOWrapper straight over FileIO): every
    `print` costs one or two WASI writes, and a partial write (the WASI stdout stream takes
    at most 8 KiB per call) silently drops the rest of a long line. BufferedWriter retries
    partial writes and coalesces output into few writes (the host counts writes, spec 9.2);
    the driver flushes at the end of every run (and `_StreamingText` while it lasts).
    """
    for name in ("stdout", "stderr"):
        old = getattr(sys, name)
        if not isinstance(getattr(old, "buffer", None), io.FileIO):
            continue
        old.flush()
        _REPLACED_STDIO.append(old)  # if collected, it would close the fd
        raw = io.FileIO(old.fileno(), "wb", closefd=False)
        stream = _StreamingText(
            io.BufferedWriter(raw, buffer_size=1 << 16),
            encoding=old.encoding,
            errors=old.errors,
            line_buffering=False,
            write_through=False,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


PRELOADED = _preload_stdlib()
_patch_asyncio()
_buffered_stdio()
time.sleep = _flushing_sleep
# Some imports above may have written to stdout (none should); start clean.
sys.stdout.flush()
sys.stderr.flush()


# --- protobuf codec (ExecuteRequest in, ExecuteResponse out) ------------------------------


def _varint(data, pos):
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(data):
    """Yield (field number, wire type, value) for one message; skips nothing silently."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def decode_request(data):
    """ExecuteRequest -> dict(code, env, session, cwd, restored)."""
    request = {"code": "", "env": {}, "session": False, "cwd": "", "restored": False}
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            request["code"] = bytes(value).decode("utf-8")
        elif number == 2 and wire == 2:
            key = val = ""
            for n, w, v in _fields(value):
                if n == 1 and w == 2:
                    key = bytes(v).decode("utf-8")
                elif n == 2 and w == 2:
                    val = bytes(v).decode("utf-8")
            request["env"][key] = val
        elif number == 3 and wire == 0:
            request["session"] = bool(value)
        elif number == 4 and wire == 2:
            request["cwd"] = bytes(value).decode("utf-8")
        elif number == 8 and wire == 0:
            request["restored"] = bool(value)
    return request


def _encode_varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes_field(number, payload):
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def _str_field(number, text):
    return _bytes_field(number, text.encode("utf-8", "surrogatepass"))


def encode_response(result=None, error=None, cwd=""):
    """result: ("text" | "json", str) or None; error: (name, message, [lines]) or None."""
    out = bytearray()
    if result is not None:
        kind, text = result
        out += _bytes_field(1, _str_field(1 if kind == "text" else 2, text))
    if error is not None:
        name, message, traceback = error
        body = _str_field(1, name) + _str_field(2, message)
        for line in traceback:
            body += _str_field(3, line)
        out += _bytes_field(2, body)
    if cwd:
        out += _str_field(4, cwd)
    return bytes(out)


# --- execution -----------------------------------------------------------------------------

FILENAME = "<sandbox>"
WORKSPACE = "/workspace"
_DRIVER_FILE = sys._getframe().f_code.co_filename
_session_main = None
_initialized = False
_SESSION_ENVIRON = os.environ


def _getpid():
    """Spec 9.3's fixed POSIX stub (wasi-libc's is 42)."""
    return 1


os.getpid = _getpid


def _exit_as_exception(status=0):
    """`os._exit` would end the whole WASI instance (a host-level trap): raise instead."""
    raise SystemExit(status)


def _abort_as_exception():
    """`os.abort` would trap the instance: report it like a SIGABRT exit status instead."""
    raise SystemExit(134)


os._exit = _exit_as_exception
os.abort = _abort_as_exception


def _first_run_init():
    """Per-instance setup that must not be baked into the build-time snapshot, nor into a
    memory snapshot that another instance restores."""
    # `random` was seeded while the component was built (or before the snapshot): every
    # instance would repeat the same sequence. Re-seed from the host CSPRNG (WASI random)
    # once per instance, restored ones included (spec 7.7).
    random.seed()


def _fresh_main():
    """A `__main__` module whose namespace is exactly {"__name__", "__builtins__"} (spec 9.4)."""
    module = types.ModuleType("__main__")
    namespace = module.__dict__
    namespace.clear()
    namespace["__name__"] = "__main__"
    namespace["__builtins__"] = builtins
    return module


def _set_environ(env, session):
    """Spec 9.4: a stateless run's `os.environ` is a plain dict of the supplied variables;
    a context's is the real mapping, cleared and refilled before each run (spec 7.8)."""
    if not session:
        os.environ = dict(env)
        return
    os.environ = _SESSION_ENVIRON
    os.environ.clear()
    for key, value in env.items():
        try:
            os.environ[key] = value
        except (ValueError, OSError):
            continue  # e.g. an embedded NUL: the host validates keys, so just skip it


def _set_sys_path(session):
    while WORKSPACE in sys.path:
        sys.path.remove(WORKSPACE)
    if session:
        sys.path.insert(0, WORKSPACE)
        # The host may have written modules since the last run: drop stale directory caches.
        sys.path_importer_cache.pop(WORKSPACE, None)


def _session_cwd():
    try:
        cwd = os.getcwd()
    except OSError:
        return WORKSPACE
    if (cwd == WORKSPACE or cwd.startswith(WORKSPACE + "/")) and os.path.isdir(cwd):
        return cwd
    return WORKSPACE


def _split(code):
    """Compile `code` into (body, trailing expression or None), both with file <sandbox>."""
    tree = ast.parse(code, FILENAME, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, FILENAME, "exec")
    expr = compile(last, FILENAME, "eval") if last is not None else None
    return body, expr


def map_value(value):
    """Spec 3.2 for Python: None -> no entry; JSON-able dict/list -> json; else repr text."""
    if value is None:
        return None
    if isinstance(value, (dict, list)):
        try:
            return ("json", json.dumps(value, allow_nan=False))
        except Exception:  # noqa: BLE001 - NaN, non-JSON members, cycles: fall back to repr
            pass
    return ("text", repr(value))


def _safe_str(exc):
    try:
        return str(exc)
    except BaseException:  # noqa: BLE001 - a broken __str__ must not break the driver
        return f"<unprintable {type(exc).__name__} object>"


def map_error(exc):
    """Spec 3.3 for Python: (class name, str(exc), header + one line per frame).

    Frames start at the first user-code frame (`<sandbox>`); driver frames are dropped, and
    stdlib frames called from user code are kept with their file names. A SyntaxError in the
    submitted code therefore has only the header line (its message carries the line).
    """
    name = type(exc).__name__
    message = _safe_str(exc)
    lines = [f"{name}: {message}" if message else name]
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != FILENAME:
        tb = tb.tb_next
    previous, repeats = None, 0
    while tb is not None:
        code = tb.tb_frame.f_code
        tb_lineno, tb = tb.tb_lineno, tb.tb_next
        if code.co_filename == _DRIVER_FILE:
            continue
        line = f'  File "{code.co_filename}", line {tb_lineno}, in {code.co_name}'
        if line == previous:
            repeats += 1
            if repeats >= _RECURSIVE_CUTOFF:
                continue
        else:
            _close_repeats(lines, repeats)
            previous, repeats = line, 0
        lines.append(line)
    _close_repeats(lines, repeats)
    return (name, message, lines)


_RECURSIVE_CUTOFF = 3
"""Like CPython's traceback module: show a repeated frame 3 times, then count the rest."""


def _close_repeats(lines, repeats):
    hidden = repeats - _RECURSIVE_CUTOFF + 1
    if hidden > 0:
        lines.append(f"  [Previous line repeated {hidden} more time{'s' if hidden > 1 else ''}]")


def _flush():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:  # noqa: BLE001 - user replaced/closed a stream
            pass


def execute(request):
    """Run one request; return (result, error, cwd) for `encode_response`."""
    global _session_main, _initialized
    if not _initialized or request["restored"]:
        _first_run_init()
        _initialized = True
    session = request["session"]
    _set_environ(request["env"], session)
    _set_sys_path(session)
    if session:
        if _session_main is None:
            _session_main = _fresh_main()
        main = _session_main
        try:
            os.chdir(request["cwd"] or WORKSPACE)
        except (OSError, ValueError):
            pass
    else:
        main = _fresh_main()
        try:
            os.chdir("/")
        except OSError:
            pass
    saved_main = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    result = error = None
    try:
        body, expr = _split(request["code"])
        exec(body, main.__dict__)
        if expr is not None:
            result = map_value(eval(expr, main.__dict__))
    except BaseException as exc:  # noqa: BLE001 - includes SystemExit / KeyboardInterrupt
        result = None
        error = map_error(exc)
        exc = None  # break the frame <-> traceback cycle
    finally:
        if not session and saved_main is not None:
            sys.modules["__main__"] = saved_main
        _flush()
    return result, error, _session_cwd() if session else ""


class WitWorld(wit_world.WitWorld):
    def run(self, request: bytes) -> bytes:
        try:
            return encode_response(*execute(decode_request(request)))
        except BaseException as exc:  # noqa: BLE001 - driver bug or MemoryError: still answer
            _flush()
            try:
                return encode_response(error=("EngineError", f"python guest driver: {exc!r}", []))
            except BaseException:  # noqa: BLE001
                return b""
