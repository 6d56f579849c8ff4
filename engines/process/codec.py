"""JSON shapes of what crosses the engine-process boundary: limits, reports, snapshots,
and workspace states (file bytes as blobs).

A snapshot travels the same way it is stored (memory bytes apart, globals and host state
as JSON), so every engine's snapshot state is proven to survive serialization on every
restore, not only after a restart.
"""

from __future__ import annotations

import dataclasses
import fcntl
import mmap
import os
from collections.abc import Sequence
from stat import S_ISREG
from typing import Any, get_args

from engines.result import (
    LIMIT_ERROR,
    Boot,
    ExecutionError,
    ExecutionReport,
    ExecutionResult,
    Limits,
    reset_note,
)
from engines.session import Session
from engines.snapshot import (
    BLOCK_BYTES,
    PAGE_BYTES,
    MemorySnapshot,
    SnapshotDelta,
    adopt_memory_file,
    block_memory,
    sparse_snapshot,
)
from engines.vfs import Kind, PathState, TreeUpdate, VfsLimits

Blob = bytes | bytearray | memoryview
_KINDS = frozenset(get_args(Kind))


def limits_to_json(limits: Limits) -> dict[str, Any]:
    return dataclasses.asdict(limits)


def limits_from_json(data: dict[str, Any]) -> Limits:
    names = {field.name for field in dataclasses.fields(Limits)}
    return Limits(**{key: value for key, value in data.items() if key in names})


def vfs_limits_to_json(limits: VfsLimits) -> dict[str, Any]:
    return dataclasses.asdict(limits)


def vfs_limits_from_json(data: dict[str, Any]) -> VfsLimits:
    return VfsLimits(
        file_bytes=int(data["file_bytes"]),
        total_bytes=int(data["total_bytes"]),
        entries=int(data["entries"]),
        name_bytes=int(data["name_bytes"]),
        path_bytes=int(data["path_bytes"]),
        denied=bool(data["denied"]),
    )


def states_to_json(states: Sequence[PathState], blobs: list[Blob]) -> list[list[Any]]:
    """[path, kind, mtime_ms, blob] per state; a file's bytes go to the end of `blobs`
    (`blob` is their index, -1 for no bytes)."""
    encoded: list[list[Any]] = []
    for state in states:
        blob = -1
        if state.kind == "file":
            blob = len(blobs)
            blobs.append(state.data)
        encoded.append([state.path, state.kind, state.mtime_ms, blob])
    return encoded


def states_from_json(data: object, blobs: Sequence[Blob]) -> tuple[PathState, ...]:
    """What `states_to_json` wrote (ValueError when malformed: it may come from a process
    that runs untrusted code)."""
    if not isinstance(data, list):
        raise ValueError("workspace states: not a list")
    states = []
    for item in data:
        if not (isinstance(item, list) and len(item) == 4):
            raise ValueError("workspace states: malformed entry")
        path, kind, mtime_ms, blob = item
        if not isinstance(path, str) or kind not in _KINDS or not isinstance(mtime_ms, int):
            raise ValueError("workspace states: malformed entry")
        if kind == "file":
            if not isinstance(blob, int) or not 0 <= blob < len(blobs):
                raise ValueError("workspace states: a file without its bytes")
            data_bytes = bytes(blobs[blob])
        else:
            data_bytes = b""
        states.append(PathState(path, kind, data_bytes, mtime_ms))
    return tuple(states)


def update_to_json(update: TreeUpdate, blobs: list[Blob]) -> dict[str, Any]:
    return {"replace": update.replace, "states": states_to_json(update.states, blobs)}


def update_from_json(data: dict[str, Any], blobs: Sequence[Blob]) -> TreeUpdate:
    return TreeUpdate(states_from_json(data["states"], blobs), bool(data["replace"]))


def report_to_json(report: ExecutionReport, blobs: list[Blob]) -> dict[str, Any]:
    """The report, its workspace changes' bytes appended to `blobs`."""
    return {
        "result": report.result.to_json(),
        "cwd": report.cwd,
        "boot": report.boot.value,
        "invalidated": report.invalidated,
        "notes": list(report.notes),
        "restorePointDropped": report.restore_point_dropped,
        "changes": states_to_json(report.changes, blobs),
        "cpuMs": report.cpu_ms,
    }


def report_from_json(data: dict[str, Any], blobs: Sequence[Blob] = ()) -> ExecutionReport:
    return ExecutionReport(
        result=ExecutionResult.from_json(data["result"]),
        cwd=str(data["cwd"]),
        boot=Boot(data["boot"]),
        invalidated=bool(data["invalidated"]),
        notes=[str(note) for note in data.get("notes") or []],
        restore_point_dropped=bool(data.get("restorePointDropped")),
        changes=list(states_from_json(data.get("changes") or [], blobs)),
        cpu_ms=float(cpu_ms) if isinstance(cpu_ms := data.get("cpuMs"), int | float) else None,
    )


def abandoned_report(session: Session, code: str, message: str) -> dict[str, Any]:
    """The report of a call the guest never returned from (its process is ending)."""
    stdout, stderr = session.captured_logs()
    result = ExecutionResult(
        code=code,
        language=session.language_engine.language,
        engine=session.language_engine.engine,
        duration_ms=0.0,
        stdout=stdout,
        stderr=stderr,
        error=ExecutionError(LIMIT_ERROR, message, []),
    )
    note = reset_note(restorable=session.restore_point is not None)
    # The host knows the call's cwd and where its instance came from; it fills them in.
    report = ExecutionReport(result, "", Boot.RESIDENT, invalidated=True, notes=[note])
    return report_to_json(report, [])


def restore_to_json(restore: SnapshotDelta) -> tuple[dict[str, Any], list[memoryview]]:
    """A restore point for a new engine process: its blocks over the image, as runs in
    the header and a blob per block (written as they are, not joined into a copy)."""
    runs = _runs(set(restore.blocks))
    blobs = [
        memoryview(restore.blocks[index])
        for first, count in runs
        for index in range(first, first + count)
    ]
    return _restore_header(restore, runs), blobs


def _restore_header(restore: SnapshotDelta, runs: list[tuple[int, int]]) -> dict[str, Any]:
    """A restore point's header: its memory's length, runs of blocks, globals, host state."""
    return {
        "length": restore.length,
        "runs": [list(run) for run in runs],
        "globals": restore.globals,
        "extra": restore.extra,
        "fromImage": True,
    }


def restore_memory_file(restore: SnapshotDelta) -> tuple[dict[str, Any], int]:
    """A restore point for a new engine process as a memory file: its blocks written at
    their offsets (one copy, in the kernel, with no pipe between), the file sealed
    against resizing, and the header of the `restore` that goes with it. The caller hands
    the descriptor over and closes it; the host never reads the file back."""
    runs = _runs(set(restore.blocks))
    memory_file = os.memfd_create("sandbox-restore", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(memory_file, restore.length)
        for first, count in runs:
            blocks = [restore.blocks[index] for index in range(first, first + count)]
            offset = first * BLOCK_BYTES
            for start in range(0, count, _IOV_MAX):
                pieces = blocks[start : start + _IOV_MAX]
                if os.pwritev(memory_file, pieces, offset) != len(pieces) * BLOCK_BYTES:
                    raise OSError("a short write to a restore point's memory file")
                offset += len(pieces) * BLOCK_BYTES
        fcntl.fcntl(
            memory_file,
            fcntl.F_ADD_SEALS,
            fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL,
        )
    except BaseException:
        os.close(memory_file)
        raise
    return {**_restore_header(restore, runs), "memoryFile": True}, memory_file


def restore_from_memory_file(header: dict[str, Any], memory_file: int) -> MemorySnapshot:
    """The restore point `restore_memory_file` wrote, mapped from the file handed over
    (whose descriptor it takes, and closes on failure; ValueError for a malformed one)."""
    try:
        layout = _restore_layout(header, None)
        if layout is None:
            raise ValueError("snapshot: a malformed restore point")
        length, blocks = layout
        status = os.fstat(memory_file)
        if not S_ISREG(status.st_mode) or status.st_size != length:
            raise ValueError("snapshot: the restore point's memory file is not its size")
        memory = adopt_memory_file(memory_file, length)
    except BaseException:
        os.close(memory_file)
        raise
    return _kept_blocks_snapshot(header, memory, length, blocks)


def _kept_blocks_snapshot(
    header: dict[str, Any], memory: mmap.mmap, length: int, blocks: list[int]
) -> MemorySnapshot:
    """A restore point's snapshot whose `memory` holds its `blocks` at their offsets."""
    written = bytearray(length // BLOCK_BYTES)
    for index in blocks:
        written[index] = 1
    return MemorySnapshot(
        memory,
        dict(header["globals"]),
        dict(header["extra"]),
        written=bytes(written),
        sparse=True,
    )


_IOV_MAX = 1024
"""Pieces per `pwritev` call (Linux's IOV_MAX)."""
MAX_MEMORY_BYTES = 1 << 32
"""A 32-bit linear memory's largest size."""


def _restore_layout(restore: Any, sizes: Sequence[int] | None) -> tuple[int, list[int]] | None:
    """A restore point's memory length and block indices, if its length is a whole number
    of 64 KiB pages of a 32-bit memory and its runs (integers, checked before any is
    expanded) lie inside it, do not overlap and match `sizes` (a block each; None: the
    blocks are in a memory file, not blobs)."""
    try:
        length = restore["length"]
        runs = [(first, count) for first, count in restore["runs"]]
    except (TypeError, KeyError, ValueError):
        return None
    integers = all(type(number) is int for run in runs for number in run)
    if (
        type(length) is not int
        or not 0 < length <= MAX_MEMORY_BYTES
        or length % PAGE_BYTES
        or not integers
        or any(
            count < 1 or first < 0 or (first + count) * BLOCK_BYTES > length
            for first, count in runs
        )
        or (
            sizes is not None
            and (
                sum(count for _, count in runs) != len(sizes)
                or any(size != BLOCK_BYTES for size in sizes)
            )
        )
    ):
        return None
    blocks = [first + index for first, count in runs for index in range(count)]
    return (length, blocks) if len(set(blocks)) == len(blocks) else None


def place_restore(header: dict[str, Any], sizes: list[int]) -> list[memoryview] | None:
    """Where a `restore` request's blocks are read to (a `frames.Placement`): each
    block straight into its place in the memory of the snapshot it becomes, so that it is
    copied once out of the pipe (a buffer, then a copy per block, cost JavaScript's restore
    three allocations per block; see benchmarks/README.md). None for anything else, or
    for a malformed one (which `restore_from_json` then refuses)."""
    layout = _restore_layout(header, sizes) if header.get("op") == "restore" else None
    if layout is None or not sizes:
        return None
    length, blocks = layout
    whole = memoryview(block_memory(length))
    return [whole[index * BLOCK_BYTES : (index + 1) * BLOCK_BYTES] for index in blocks]


def restore_from_json(header: dict[str, Any], blobs: list[memoryview]) -> MemorySnapshot:
    """The restore point `restore_to_json` sent, as a snapshot an instance restores from:
    the memory `place_restore` read it into, else a copy of its blocks (ValueError for a
    malformed one)."""
    layout = _restore_layout(header, [len(blob) for blob in blobs])
    if layout is None:
        raise ValueError("snapshot: a malformed restore point")
    length, blocks = layout
    memory = blobs[0].obj if blobs else None
    if isinstance(memory, mmap.mmap) and all(blob.obj is memory for blob in blobs):
        return _kept_blocks_snapshot(header, memory, length, blocks)
    blocks_by_index = dict(zip(blocks, blobs, strict=True))
    guest_globals, extra = dict(header["globals"]), dict(header["extra"])
    return sparse_snapshot(
        SnapshotDelta(length, blocks_by_index, guest_globals, extra, from_image=True)
    )


def _runs(blocks: set[int]) -> list[tuple[int, int]]:
    """Consecutive blocks as (first, count) runs."""
    runs: list[tuple[int, int]] = []
    for block in sorted(blocks):
        if runs and runs[-1][0] + runs[-1][1] == block:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((block, 1))
    return runs


def snapshot_delta(snapshot: MemorySnapshot) -> tuple[dict[str, Any], list[memoryview]]:
    """The 4 KiB blocks changed since the last delta, as runs (views of the snapshot's
    memory, to be written and released before it changes again), with globals and host
    state."""
    runs = _runs(snapshot.changed_blocks)
    view = memoryview(snapshot.memory)
    blobs = [view[first * BLOCK_BYTES : (first + count) * BLOCK_BYTES] for first, count in runs]
    header = {
        "length": len(snapshot.memory),
        "runs": [list(run) for run in runs],
        "globals": snapshot.globals,
        "extra": snapshot.extra,
        "fromImage": snapshot.from_image,
    }
    return header, blobs


def merge_delta(
    into: SnapshotDelta | None, header: dict[str, Any], blobs: list[memoryview]
) -> SnapshotDelta:
    """Add a delta's blocks to those held (`into`; a delta `fromImage` replaces them):
    each run copied once, its blocks views of that copy (one large buffer goes back to
    the system when freed, where thousands of 4 KiB ones would stay in the heap)."""
    length = int(header["length"])
    runs = [(int(first), int(count)) for first, count in header["runs"]]
    if len(runs) != len(blobs):
        raise ValueError("snapshot delta: run list and blobs differ")
    from_image = bool(header.get("fromImage")) or (into is not None and into.from_image)
    kept = {} if into is None or header.get("fromImage") else into.blocks
    blocks = {index: block for index, block in kept.items() if index * BLOCK_BYTES < length}
    for (first, count), data in zip(runs, blobs, strict=True):
        if count < 1 or len(data) != count * BLOCK_BYTES or (first + count) * BLOCK_BYTES > length:
            raise ValueError("snapshot delta: a run past the end of memory")
        copy = memoryview(bytes(data))
        for index in range(count):
            blocks[first + index] = copy[index * BLOCK_BYTES : (index + 1) * BLOCK_BYTES]
    return SnapshotDelta(length, blocks, dict(header["globals"]), dict(header["extra"]), from_image)
