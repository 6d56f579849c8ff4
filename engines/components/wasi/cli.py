"""`wasi:cli`, `wasi:clocks` and `wasi:random`: an empty environment, the session's
argv and output, no terminal, the host's clocks and CSPRNG."""

from __future__ import annotations

import os
import time

from engines.components.wasi.abi import Call, GuestExit, GuestTrap, i64, implements, u64


@implements("wasi:cli/environment#get-environment", params="i")
def get_environment(call: Call, ret: int) -> None:
    """Always empty: the effective environment travels in the request (spec 10)."""
    call.memory.pack("II", ret, 0, 0)


@implements("wasi:cli/environment#get-arguments", params="i")
def get_arguments(call: Call, ret: int) -> None:
    argv = call.host.argv
    base = call.alloc(8 * len(argv), 4) if argv else 0
    for index, argument in enumerate(argv):
        call.memory.pack("II", base + 8 * index, *call.string_out(argument))
    call.memory.pack("II", ret, base, len(argv))


@implements("wasi:cli/exit#exit", params="i")
def exit_(call: Call, status: int) -> None:
    raise GuestExit(0 if status == 0 else 1)


@implements("wasi:cli/stdin#get-stdin", params="", results="i")
def get_stdin(call: Call) -> int:
    stdin = {"type": "input-stream", "source": "stdin", "preopen": -1, "path": "", "offset": 0}
    return call.host.add(stdin)


@implements("wasi:cli/stdout#get-stdout", params="", results="i")
def get_stdout(call: Call) -> int:
    return call.host.add(_output("stdout"))


@implements("wasi:cli/stderr#get-stderr", params="", results="i")
def get_stderr(call: Call) -> int:
    return call.host.add(_output("stderr"))


def _output(sink: str) -> dict[str, object]:
    return {
        "type": "output-stream",
        "sink": sink,
        "preopen": -1,
        "path": "",
        "offset": 0,
        "append": False,
    }


@implements(
    "wasi:cli/terminal-stdin#get-terminal-stdin",
    "wasi:cli/terminal-stdout#get-terminal-stdout",
    "wasi:cli/terminal-stderr#get-terminal-stderr",
    params="i",
)
def get_terminal(call: Call, ret: int) -> None:
    call.memory.pack("B", ret, 0)  # none: never a terminal


@implements("wasi:clocks/monotonic-clock#now", params="", results="I")
def monotonic_now(call: Call) -> int:
    return i64(call.host.monotonic())


@implements("wasi:clocks/monotonic-clock#resolution", params="", results="I")
def monotonic_resolution(call: Call) -> int:
    return 1


@implements("wasi:clocks/monotonic-clock#subscribe-instant", params="I", results="i")
def subscribe_instant(call: Call, when: int) -> int:
    return call.host.add({"type": "pollable", "deadline": u64(when)})


@implements("wasi:clocks/monotonic-clock#subscribe-duration", params="I", results="i")
def subscribe_duration(call: Call, duration: int) -> int:
    return call.host.add({"type": "pollable", "deadline": call.host.monotonic() + u64(duration)})


@implements("wasi:clocks/wall-clock#now", params="i")
def wall_now(call: Call, ret: int) -> None:
    now = time.time_ns()
    call.memory.pack("QI", ret, now // 1_000_000_000, now % 1_000_000_000)


@implements("wasi:clocks/wall-clock#resolution", params="i")
def wall_resolution(call: Call, ret: int) -> None:
    call.memory.pack("QI", ret, 0, 1)


@implements("wasi:random/random#get-random-bytes", params="Ii")
def random_bytes(call: Call, length: int, ret: int) -> None:
    wanted = u64(length)
    if wanted > call.memory.size():
        raise GuestTrap(f"{wanted} random bytes do not fit in guest memory")
    call.memory.pack("II", ret, *call.bytes_out(os.urandom(wanted)))


@implements("wasi:random/random#get-random-u64", params="", results="I")
def random_u64(call: Call) -> int:
    return i64(int.from_bytes(os.urandom(8), "little"))
