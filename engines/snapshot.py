"""Linear-memory snapshots of core-module guests (Perl and Ruby; Python and JavaScript
through `engines.components`).

A core module keeps its interpreter state in linear memory plus a few mutable globals
(the stack pointer, among others). The builds we use do not export their globals, so at
prepare time `export_globals` rewrites the module to export each defined global as
`__g<index>`. A snapshot is then the memory bytes, those globals and whatever host-side
state the adapter keeps (`extra`); restoring copies them into a fresh instance whose
initialisers were not run (spec 7.7, restore recipe).

A fresh instance maps its memory image copy-on-write, and a guest writes to a small part
of it (Python: about 1 MiB of 28 after a run). Where the kernel tells which pages a
process wrote (`written_blocks`, from `/proc/self/pagemap`), a snapshot keeps only those
blocks, from the first one on: the others are what a fresh instance maps there, so
restoring writes the kept blocks into a fresh instance, and taking a snapshot again into
the previous one of the same context compares the written blocks only, copying those that
changed and recording them in `changed_blocks` (a run typically changes a few hundred KiB
of 32-65 MiB). Where the kernel cannot tell, a snapshot is a whole copy of the memory,
and the next one compares it 1 MiB chunk by chunk in place (memcmp), then the 4 KiB
blocks of those that differ. A written block that holds only zeros where the fresh
instance had no image mapped (`image_blocks`: its stack and heap, which read as zero) is
left out too, as restoring it would change nothing.

Kept blocks live in windows of a memory file (`BlockMemory`: a memfd of the process's own
where Linux has one, or a restore point's memfd the host wrote and handed over), so a
restore maps runs of them copy-on-write into the fresh
instance's memory instead of copying them: a copy faults in each page of the image it
lands on (about 5 µs a page on these machines), a mapping costs one call per run and the
guest faults in only what it touches, as a cold start does. While an instance maps its
restore point, that snapshot's memory is written only where the guest wrote (and so holds
its own copy of the page): `capture` copies only blocks that differ, and a block the guest
left alone reads the file. So a snapshot is mapped into one live instance at a time (a
second restore from it copies), and every memory that instance maps stays while it lives
(`_Armed.pinned`). The kernel's page flags see a mapped block the guest left alone as the
file's, not as written: a snapshot into the memory those blocks read (`_Armed.source`)
compares only the blocks flagged as written, and any other snapshot counts every mapped
block as written.

A capture maps blocks too ("arms" them): a block the kernel flags as written that
`ARM_AFTER` captures in a row found unchanged is mapped from the snapshot's memory, which
holds the same bytes, over the guest's, so later captures skip it until the guest writes
it again. A snapshot then compares what the guest wrote lately, not everything it ever
wrote (JavaScript's after sixty runs of `1+1`: 176 blocks instead of 990), and the
guest's untouched blocks share the snapshot's pages instead of holding copies. A block
found written again after it was mapped is not armed again: a guest writes some pages on
every run, and each arming would cost a mapping and a fault.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import re
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import wasmtime

from engines.wasm_binary import GLOBAL_PREFIX, export_definitions

PAGE_BYTES = 65536
CHUNK_BYTES = 1 << 20
BLOCK_BYTES = 4096

_libc = ctypes.CDLL(None, use_errno=True)
_memcmp = _libc.memcmp
_memcmp.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_memcmp.restype = ctypes.c_int
_mmap = _libc.mmap
_mmap.argtypes = (
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
)
_mmap.restype = ctypes.c_void_p
_fallocate = _libc.fallocate
_fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long)
_fallocate.restype = ctypes.c_int
_madvise = _libc.madvise
_madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_madvise.restype = ctypes.c_int
_MAP_FIXED = 0x10
_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02
"""Linux's values (the standard library does not export them)."""
MEMORY_FILE_BYTES = 1 << 44
"""The size of a process's memory file. Windows are never reused and the file costs only
what is written in it, so it is far larger than all the snapshots a process makes."""
_ZERO_CHUNK = bytes(CHUNK_BYTES)
MAPPED_RUN_BLOCKS = 8
"""A restore maps runs of at least this many blocks and copies shorter ones: a mapping
costs about two copies' worth of faults here, and a guest touches most of a short run
soon (at 2 or 4 Python's restore + first run was 3-5% slower than copying all; at 8,
JavaScript's is as fast as at 2)."""
MAPPED_RUNS_MAX = 4096
"""At most this many runs of a restore are mapped (each is a mapping of its own, and a
process may have about 65,000); the shortest runs are copied instead."""


Buffer = bytes | bytearray | mmap.mmap


@dataclass(frozen=True)
class _Mapping:
    """An instance (by its store) that a snapshot's memory was mapped into, and that
    memory, kept while the instance may still map it."""

    store: weakref.ref[wasmtime.Store]
    memory: Buffer

    def live(self) -> bool:
        """Whether the instance can still map the memory (its store is not closed)."""
        store = self.store()
        if store is None:
            return False
        try:
            store.ptr()
        except ValueError:  # closed
            return False
        return True


ARM_AFTER = 2
"""Captures in a row that find a written block unchanged before it is armed."""
_HOT = 255
"""A block's streak once it was found written after it was mapped: it is not armed again
(a block the guest writes on every run would cost a mapping and a fault each time)."""


@dataclass
class _Armed:
    """The blocks of a live store's memory that are mapped from snapshot memory (by a
    restore, or armed after a capture), and the snapshot memory that a block the guest has
    not written since reads (`source`; None once that is not one memory any more)."""

    address: int
    """Where the store's memory was: a memory that moved was copied, mappings and all."""
    blocks: bytearray
    source: Buffer | None
    pinned: list[Buffer]
    """Every memory the store maps blocks of, kept while it lives: freeing one would take
    pages from under the guest."""
    streak: bytearray = field(default_factory=bytearray)
    """Per block, how many captures in a row found it written but unchanged (or `_HOT`)."""
    mappings: int = 0
    """Runs mapped into the store so far: no more than `MAPPED_RUNS_MAX` are armed (each
    is a mapping of its own, and a process may have about 65,000)."""

    def cover(self, blocks: int) -> None:
        """Make the per-block masks at least `blocks` long (the memory grew)."""
        for mask in (self.blocks, self.streak):
            if len(mask) < blocks:
                mask.extend(bytes(blocks - len(mask)))


_ARMED: weakref.WeakKeyDictionary[wasmtime.Store, _Armed] = weakref.WeakKeyDictionary()
"""Per live store whose memory maps snapshot memory (see the module's docstring)."""
_FRESH_IMAGES: weakref.WeakKeyDictionary[wasmtime.Store, tuple[int, bytes | None]] = (
    weakref.WeakKeyDictionary()
)
"""Per live store: its memory's address and `image_blocks` of it, read at its first
snapshot, or None where a restore mapped anonymous memory over a run (`_map_runs`
refused), which the mappings would take for memory the fresh instance had no image in."""


@dataclass
class MemorySnapshot:
    memory: Buffer
    globals: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    changed_blocks: set[int] = field(default_factory=set)
    """4 KiB blocks changed since they were last sent elsewhere (all, when new): a run
    typically changes a few hundred KiB spread over many chunks, so copies between
    processes travel by block."""
    written: bytes | None = None
    """Per 4 KiB block, 1 where the instance it was taken from had written it (see
    `written_blocks`; None: not known)."""
    sparse: bool = False
    """`memory` holds only the `written` blocks (the others read as zero here, and are
    what a fresh instance maps there): see `keep_written_only`."""
    from_image: bool = False
    """`changed_blocks` say what differs from what a fresh instance maps (its image), not
    from an earlier snapshot: a new snapshot (its receiver drops what it held)."""
    mapped: _Mapping | None = None
    """The instance this snapshot's memory was last mapped into, and that memory (which
    may since have been replaced: freeing it would take its pages from under the guest)."""

    def keep_written_only(self) -> None:
        """Keep only the written blocks, in memory that costs nothing where it is not
        written (the rest reads as zero); with `written` unknown, keep everything."""
        if self.sparse or self.written is None:
            return
        self.memory = _written_copy(_address(self.memory), len(self.memory), self.written)
        self.sparse = True

    @property
    def pages(self) -> int:
        return len(self.memory) // PAGE_BYTES


@dataclass
class SnapshotDelta:
    """4 KiB blocks of a guest's memory by index, with the memory's length, globals and
    host state: those changed since the snapshot was last stored, or, `from_image`, those
    that differ from what a fresh instance maps (its image; every block where that cannot
    be told). What the host keeps and stores of a guest's memory, and restores from."""

    length: int
    blocks: dict[int, memoryview]
    globals: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    from_image: bool = False


def sparse_snapshot(delta: SnapshotDelta) -> MemorySnapshot:
    """A snapshot to restore from a `from_image` delta: its blocks over a fresh instance."""
    memory = block_memory(max(delta.length, 1))
    written = bytearray(delta.length // BLOCK_BYTES)
    for index, block in delta.blocks.items():
        if len(block) != BLOCK_BYTES or not 0 <= index < len(written):
            raise ValueError("snapshot: a block past the end of memory")
        memory[index * BLOCK_BYTES : (index + 1) * BLOCK_BYTES] = block
        written[index] = 1
    return MemorySnapshot(
        memory, dict(delta.globals), dict(delta.extra), written=bytes(written), sparse=True
    )


_RUNS = re.compile(b"\x01+")
"""Runs of written blocks in a `written` mask."""
PRESENT, SWAPPED, FILE_OR_SHARED, EXCLUSIVE = 0x80, 0x40, 0x20, 0x01
"""Flags of a `/proc/self/pagemap` entry, in its top byte (bits 63, 62, 61 and 56)."""


def _address(buffer: Buffer) -> int:
    if isinstance(buffer, (bytearray, mmap.mmap)):
        return ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))
    return ctypes.cast(ctypes.c_char_p(buffer), ctypes.c_void_p).value or 0


def _private_memory(size: int) -> mmap.mmap:
    """Zeroed memory that costs nothing where it is not written (private anonymous pages:
    Python's default anonymous mapping is shared, which the kernel counts as a file's)."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


class BlockMemory(mmap.mmap):
    """A snapshot's kept blocks: a window of this process's memory file, or a memory file
    handed over whole (see the module's docstring)."""

    fd: int
    offset: int
    """Where the window starts in the file."""


class _MemoryFile:
    """A memfd of this process's own, handed out in windows that are never reused."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.fd = os.memfd_create("sandbox-snapshot", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, MEMORY_FILE_BYTES)
        except OSError:
            os.close(self.fd)
            raise
        self.next_offset = 0
        self.lock = threading.Lock()

    def window(self, size: int) -> BlockMemory | None:
        length = -(-size // BLOCK_BYTES) * BLOCK_BYTES
        with self.lock:
            offset = self.next_offset
            if offset + length > MEMORY_FILE_BYTES:
                return None
            self.next_offset += length
        memory = BlockMemory(self.fd, size, offset=offset)
        memory.fd, memory.offset = self.fd, offset
        weakref.finalize(memory, self.free, offset, length)
        return memory

    def free(self, offset: int, length: int) -> None:
        """Give a window's pages back (a fork's copy of this object frees nothing)."""
        if os.getpid() == self.pid:
            _fallocate(self.fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length)


_memory_file: _MemoryFile | None = None
_memory_file_lock = threading.Lock()


def reserve_memory_file() -> bool:
    """Make this process's memory file now, if it has none: an engine process does so
    before it limits the size of the files it writes (sizing the file counts as writing
    it). False where there can be none (not Linux, or the size is refused)."""
    global _memory_file
    if not hasattr(os, "memfd_create") or mmap.PAGESIZE != BLOCK_BYTES:
        return False
    with _memory_file_lock:
        if _memory_file is None or _memory_file.pid != os.getpid():  # a fork makes its own
            try:
                _memory_file = _MemoryFile()
            except OSError:
                _memory_file = None
                return False
    return True


def block_memory(size: int) -> mmap.mmap:
    """Zeroed memory for a snapshot's kept blocks that costs nothing where it is not
    written: a `BlockMemory` where this process has a memory file, private pages elsewhere."""
    window = _memory_file.window(size) if reserve_memory_file() and _memory_file else None
    return window if window is not None else _private_memory(size)


def adopt_memory_file(memory_file: int, length: int) -> BlockMemory:
    """A memory file of `length` bytes that another process wrote (a restore point the
    host handed over), as a snapshot's kept blocks: mapped shared, its descriptor closed
    with the mapping. Its pages are not mapped in ahead (1.2 ms for Python's 376 runs of
    blocks, on the way to the first run): the host counts what it handed over instead."""
    memory = BlockMemory(memory_file, length)
    memory.fd, memory.offset = memory_file, 0
    weakref.finalize(memory, os.close, memory_file)
    return memory


def _written_copy(source: int, length: int, written: bytes) -> Buffer:
    """The `written` blocks at `source`, in `length` bytes of `block_memory` (the others
    read as zero; no memory at all for a memory of no pages)."""
    if not length:
        return bytearray()
    kept = block_memory(length)
    target = _address(kept)
    for run in _RUNS.finditer(written):
        start, end = run.start() * BLOCK_BYTES, run.end() * BLOCK_BYTES
        ctypes.memmove(target + start, source + start, end - start)
    return kept


def _map_blocks(address: int, memory: BlockMemory, start: int, size: int) -> bool:
    """Map `size` bytes of `memory` from `start` copy-on-write at `address`. False if
    refused: a failed fixed mapping may have unmapped the range, so it then gets fresh
    private pages, for the caller to copy into."""
    protection = mmap.PROT_READ | mmap.PROT_WRITE
    flags = mmap.MAP_PRIVATE | _MAP_FIXED
    if _mmap(address, size, protection, flags, memory.fd, memory.offset + start) == address:
        return True
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_FIXED
    if _mmap(address, size, protection, flags, -1, 0) != address:
        raise OSError(ctypes.get_errno(), "could not map a snapshot's blocks")
    return False


def _map_runs(target: int, memory: BlockMemory, written: bytes, armed: _Armed) -> bool:
    """Map each run of `written` blocks of `memory` copy-on-write over the same offsets of
    the guest memory at `target`, recording them in `armed`; copy runs shorter than
    `MAPPED_RUN_BLOCKS` and the shortest past `MAPPED_RUNS_MAX`. False if a mapping was
    refused (the rest is then copied)."""
    refused = False
    runs = [run.span() for run in _RUNS.finditer(written)]
    long_runs = (run for run in runs if run[1] - run[0] >= MAPPED_RUN_BLOCKS)
    longest = sorted(long_runs, key=lambda run: run[0] - run[1])
    mapped = set(longest[:MAPPED_RUNS_MAX])
    source = _address(memory)
    for first, end in runs:
        start, size = first * BLOCK_BYTES, (end - first) * BLOCK_BYTES
        address = target + start
        if (first, end) in mapped:
            if _map_blocks(address, memory, start, size):
                armed.blocks[first:end] = b"\x01" * (end - first)
                armed.mappings += 1
                continue
            mapped, refused = set(), True
        ctypes.memmove(address, source + start, size)
    return not refused


def _arm(
    target: int, memory: BlockMemory, blocks: bytes, armed: _Armed, *, capped: bool = True
) -> bool:
    """Map `blocks` of `memory`, which hold what the guest's memory at `target` holds
    there, over it: the kernel then flags as written only the blocks written after this.
    `capped`: past `MAPPED_RUNS_MAX` mappings the rest stays as it is. False if a mapping
    was refused (its run then holds a copy; the rest stays as it was)."""
    source = _address(memory)
    for run in _RUNS.finditer(blocks):
        if capped and armed.mappings >= MAPPED_RUNS_MAX:
            break
        first, end = run.span()
        start, size = first * BLOCK_BYTES, (end - first) * BLOCK_BYTES
        if not _map_blocks(target + start, memory, start, size):
            ctypes.memmove(target + start, source + start, size)
            return False
        armed.blocks[first:end] = b"\x01" * (end - first)
        armed.mappings += 1
    return True


@functools.cache
def _written_flags() -> bytes | None:
    """For each top byte of a pagemap entry: 1 if its page may hold what a fresh
    instance does not map there. Such a page was swapped out, or is private anonymous
    memory: written since the mapping was made. A page read but never written maps the
    shared zero page (never exclusive) or stays file-backed, and is not counted; while
    the kernel may merge identical pages (KSM), a merged page is not exclusive either,
    so then every anonymous page counts. None where pagemap cannot tell (not Linux,
    pages other than 4 KiB, flags missing): then no snapshot is kept sparse."""
    if mmap.PAGESIZE != BLOCK_BYTES:
        return None
    probe = _private_memory(2 * BLOCK_BYTES)
    try:
        probe[0] = 1  # written; the second page is read only
        _ = probe[BLOCK_BYTES]
        flags = _page_flags(_address(probe), 2)
    except OSError:
        return None
    finally:
        probe.close()
    if flags is None or flags[0] & (PRESENT | FILE_OR_SHARED | EXCLUSIVE) != PRESENT | EXCLUSIVE:
        return None
    merging = Path("/sys/kernel/mm/ksm/run")
    exclusive_only = not merging.exists() or merging.read_text().strip() == "0"
    table = bytearray(256)
    for top in range(256):
        anonymous = top & PRESENT and not top & FILE_OR_SHARED
        if top & SWAPPED or (anonymous and (top & EXCLUSIVE or not exclusive_only)):
            table[top] = 1
    return bytes(table)


def _page_flags(address: int, pages: int) -> bytes | None:
    """The top byte of the pagemap entry of each page from `address`."""
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(address // BLOCK_BYTES * 8)
        entries = pagemap.read(pages * 8)
    if len(entries) != pages * 8:
        return None
    return entries[7::8]  # little-endian: the top byte is the last


def image_blocks(address: int, length: int) -> bytes | None:
    """Per 4 KiB block of the memory at `address`: 1 where a file is mapped there (the
    engine's image, which wasmtime maps copy-on-write; every other block of a fresh
    instance reads as zero). None where no file is mapped in it: the image was copied in
    (or this is not Linux), so nothing tells where it is."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            listing = maps.read()
    except OSError:
        return None
    mask = bytearray(length // BLOCK_BYTES)
    found = False
    end_address = address + length
    for mapping in _MAPPING.finditer(listing):  # in address order
        low = int(mapping[1], 16)
        if low >= end_address:
            break
        high = int(mapping[2], 16)
        if high <= address or mapping[3] == b"0":  # inode 0: anonymous memory
            continue
        first = (max(low, address) - address) // BLOCK_BYTES
        end = -(-(min(high, end_address) - address) // BLOCK_BYTES)
        mask[first:end] = b"\x01" * (end - first)
        found = True
    return bytes(mask) if found else None


_MAPPING = re.compile(rb"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ (\d+)", re.MULTILINE)
"""A line of `/proc/self/maps`: start, end and inode of a mapping."""


def _fresh_image(store: wasmtime.Store, address: int, length: int) -> bytes | None:
    """Where the store's fresh instance had its image mapped (`image_blocks`), read once
    per store; None where unknown. Read after a restore, the mappings also show the runs
    it mapped from a memory file (file mappings too, so nothing is left out there); the
    rest was anonymous in the fresh instance as well, unless a refused mapping put
    anonymous memory over a run, or the memory moved when a restore grew it (wasmtime
    copies a memory that outgrows its reservation into anonymous memory; with the 4 GiB
    default a 32-bit memory never moves): `load_memory` records both as unknown. A memory
    that moved without a restore has no file mapped in it, so nothing is left out."""
    recorded = _FRESH_IMAGES.get(store)
    if recorded is None:
        recorded = _FRESH_IMAGES[store] = (address, image_blocks(address, length))
    return recorded[1] if recorded[0] == address else None


def _without_fresh_zeros(source: int, written: bytes, image: bytes) -> bytes:
    """`written` without its blocks that hold only zeros outside the image, where a fresh
    instance has zeros too: restoring them would change nothing. Ruby's interpreter
    writes 26 MiB of such zeros as it starts (6,627 of its 7,337 written blocks).

    Their pages go back to the system (`MADV_DONTNEED`: anonymous memory, so they read
    as zeros again): the process no longer holds them, and the kernel no longer counts
    them as written, so the next snapshot does not compare them again. This is safe only
    because `image` covers every file mapped into the memory (a written page of a private
    file mapping looks anonymous to the page flags, and would read the file's bytes again):
    `_fresh_image` reads it after any restore's mappings, or records it unknown, and the
    caller adds every block mapped from snapshot memory (`_Armed.blocks`)."""
    image = image[: len(written)].ljust(len(written), b"\0")
    outside = (int.from_bytes(written) & ~int.from_bytes(image)).to_bytes(len(written))
    kept = bytearray(written)
    zero = _address(_ZERO_CHUNK)
    for run in _RUNS.finditer(outside):
        first, end = run.span()
        for chunk in range(first, end, CHUNK_BYTES // BLOCK_BYTES):
            stop = min(end, chunk + CHUNK_BYTES // BLOCK_BYTES)
            size = (stop - chunk) * BLOCK_BYTES
            if _memcmp(source + chunk * BLOCK_BYTES, zero, size) == 0:
                kept[chunk:stop] = bytes(stop - chunk)
                continue
            for block in range(chunk, stop):
                if _memcmp(source + block * BLOCK_BYTES, zero, BLOCK_BYTES) == 0:
                    kept[block] = 0
    dropped = (int.from_bytes(written) & ~int.from_bytes(kept)).to_bytes(len(written))
    for run in _RUNS.finditer(dropped):  # a refusal only keeps them counted as written
        start, end = run.start() * BLOCK_BYTES, run.end() * BLOCK_BYTES
        _madvise(source + start, end - start, mmap.MADV_DONTNEED)
    return bytes(kept)


def written_blocks(address: int, length: int) -> bytes | None:
    """Per 4 KiB block of the memory at `address`: 1 where it may differ from what a
    fresh instance maps there (see `_written_flags`); None where that cannot be told."""
    table = _written_flags()
    if table is None:
        return None
    try:
        flags = _page_flags(address, length // BLOCK_BYTES)
    except OSError:
        return None
    return None if flags is None else flags.translate(table)


def _memory_address(store: wasmtime.Store, memory: wasmtime.Memory) -> int:
    return ctypes.addressof(memory.data_ptr(store).contents)


def export_globals(module: bytes) -> bytes:
    """Return `module` with every defined global exported as `__g<index>`."""
    return export_definitions(module)


def capture(
    store: wasmtime.Store,
    memory: wasmtime.Memory,
    values: dict[str, Any],
    into: MemorySnapshot | None = None,
) -> MemorySnapshot:
    """A snapshot of `memory` with the globals' `values`.

    With `into` (the previous snapshot of this instance's state), update it in place:
    only changed blocks are copied and added to its `changed_blocks`.
    """
    length = memory.data_len(store)
    source = _memory_address(store, memory)
    armed = _ARMED.get(store)
    if armed is not None and armed.address != source:  # moved: copied out of its mappings
        armed = _ARMED[store] = _Armed(source, bytearray(), None, armed.pinned)
    written = flagged = written_blocks(source, length)
    image = None
    if flagged is not None:
        image = _fresh_image(store, source, length)
        if image is not None:  # every block mapped from a file, whatever the masks' lengths
            file_backed = _either(len(flagged), image, b"" if armed is None else armed.blocks)
            written = _without_fresh_zeros(source, flagged, file_backed)
    if (
        into is not None
        and armed is not None
        and armed.source is into.memory
        and into.written is not None
        and length >= len(into.memory)
        and flagged is not None
        and written is not None
        and image is not None
    ):
        _capture_armed(store, source, length, flagged, written, into, armed)
        into.globals = values
        return into
    if armed is not None:
        # Into another snapshot (or from memory that cannot be told): the zero blocks just
        # given back may be kept in the armed source's, which no longer holds what they read.
        armed.source = None
        if written is not None:  # blocks that read snapshot memory: compare them all
            written = _either(len(written), written, armed.blocks)
    if into is None:
        if written is None:  # cannot tell: a whole copy, which the next one updates in place
            buffer = bytearray(length)
            ctypes.memmove(_address(buffer), source, length)
            snapshot = MemorySnapshot(memory=buffer, globals=values)
            snapshot.changed_blocks = set(range(length // BLOCK_BYTES))
        else:  # the written blocks only: a whole copy cost a first snapshot 40-60 ms (a
            # new page for each of 7,000-9,000 blocks) to keep a few hundred of them
            kept = _written_copy(source, length, written)
            snapshot = MemorySnapshot(memory=kept, globals=values, written=written, sparse=True)
            snapshot.changed_blocks = {
                block for run in _RUNS.finditer(written) for block in range(*run.span())
            }
            if image is not None and isinstance(kept, BlockMemory):
                # Every block that reads snapshot memory was copied into `kept`: from now
                # on they read what it holds, and its blocks may be armed.
                if armed is None:
                    armed = _ARMED[store] = _Armed(source, bytearray(), None, [])
                armed.source = kept
                armed.pinned.append(kept)
                snapshot.mapped = _Mapping(weakref.ref(store), kept)
        snapshot.from_image = True
        return snapshot
    if into.sparse:
        mapped = into.mapped
        mapped_elsewhere = (
            mapped is not None
            and mapped.memory is into.memory  # not since moved away from it
            and mapped.live()
            and mapped.store() is not store
        )
        _capture_written(source, length, written, into, relocate=mapped_elsewhere)
        into.globals = values
        return into
    buffer = into.memory if isinstance(into.memory, bytearray) else bytearray(into.memory)
    old_length = len(buffer)
    if length > old_length:
        buffer.extend(bytes(length - old_length))
    elif length < old_length:  # linear memory never shrinks; a smaller one is another state
        del buffer[length:]
    target = _address(buffer)
    for chunk in range((length + CHUNK_BYTES - 1) // CHUNK_BYTES):
        offset = chunk * CHUNK_BYTES
        size = min(CHUNK_BYTES, length - offset)
        if offset + size > old_length or _memcmp(source + offset, target + offset, size) != 0:
            _copy_changed(source, target, offset, offset + size, old_length, into.changed_blocks)
    into.memory = buffer
    into.written = written
    into.globals = values
    return into


def _capture_written(
    source: int, length: int, written: bytes | None, into: MemorySnapshot, *, relocate: bool
) -> None:
    """`capture` into a snapshot that keeps only written blocks: the blocks written now
    or kept before are compared (a block not kept before counts as changed: the copy does
    not hold what the image had there); the others are the image's, unchanged. With
    `relocate` (another live instance maps its memory, and would see the blocks written
    into it where its guest has not written), the kept blocks move to new memory first;
    `into.mapped` keeps the old memory for that instance."""
    held = into.written
    if written is None or held is None or length < len(into.memory):
        # Cannot tell any more (or another state): keep everything again.
        buffer = bytearray(length)
        ctypes.memmove(_address(buffer), source, length)
        into.memory, into.written, into.sparse = buffer, written, False
        into.changed_blocks = set(range(length // BLOCK_BYTES))
        into.from_image = True
        return
    if length > len(into.memory) or relocate:
        into.memory = _written_copy(_address(into.memory), length, held)
    held = held.ljust(len(written), b"\0")
    candidates = _either(len(written), held, written)
    target = _address(into.memory)
    for run in _RUNS.finditer(candidates):
        first, end = run.start(), run.end()
        if 0 not in held[first:end]:
            start, stop = first * BLOCK_BYTES, end * BLOCK_BYTES
            _copy_changed(source, target, start, stop, stop, into.changed_blocks)
            continue
        for block in range(first, end):
            offset = block * BLOCK_BYTES
            if held[block] and _memcmp(source + offset, target + offset, BLOCK_BYTES) == 0:
                continue
            ctypes.memmove(target + offset, source + offset, BLOCK_BYTES)
            into.changed_blocks.add(block)
    into.written = candidates


def _either(blocks: int, *masks: bytes | bytearray) -> bytes:
    """Per block of `blocks`, 1 where any of the masks has it (each cut or padded)."""
    union = 0
    for mask in masks:
        union |= int.from_bytes(bytes(mask[:blocks]).ljust(blocks, b"\0"))
    return union.to_bytes(blocks)


def _capture_armed(
    store: wasmtime.Store,
    source: int,
    length: int,
    flagged: bytes,
    written: bytes,
    into: MemorySnapshot,
    armed: _Armed,
) -> None:
    """`capture` into the snapshot whose memory the store's mapped blocks read: a block
    the kernel does not flag as written since it was mapped holds what that memory does,
    so only the flagged ones are compared (`written`, and kept blocks among those left out
    as zeros). A block found unchanged `ARM_AFTER` times in a row is armed."""
    assert into.written is not None
    blocks = len(flagged)
    armed.cover(blocks)
    if length > len(into.memory):  # grown: the kept blocks move to a larger window
        into.memory = memory = _written_copy(_address(into.memory), length, into.written)
        into.mapped = _Mapping(weakref.ref(store), memory)
        armed.pinned.append(memory)
        armed.source = None
        if isinstance(memory, BlockMemory):
            # The mapped blocks the guest has not written read the old windows: map them
            # from this one (same bytes), so that the old windows can go. Not past
            # `MAPPED_RUNS_MAX` runs (a guest that wrote every other page of a large
            # memory would take all the mappings a process may have): then they stay.
            mapped = int.from_bytes(armed.blocks[:blocks])
            unwritten = (mapped & ~int.from_bytes(flagged)).to_bytes(blocks)
            runs = sum(1 for _ in _RUNS.finditer(unwritten))
            if runs <= MAPPED_RUNS_MAX and _arm(source, memory, unwritten, armed, capped=False):
                armed.source, armed.pinned = memory, [memory]
    held = into.written.ljust(blocks, b"\0")
    flagged_held = (int.from_bytes(flagged) & int.from_bytes(held)).to_bytes(blocks)
    compared = _either(blocks, written, flagged_held)
    target, streak = _address(into.memory), armed.streak
    cold = bytearray(blocks)
    for run in _RUNS.finditer(compared):
        for block in range(*run.span()):
            offset = block * BLOCK_BYTES
            if held[block] and _memcmp(source + offset, target + offset, BLOCK_BYTES) == 0:
                if armed.blocks[block]:  # written again since it was mapped
                    streak[block] = _HOT
                elif streak[block] < ARM_AFTER:
                    streak[block] += 1
                    cold[block] = streak[block] == ARM_AFTER
                continue
            ctypes.memmove(target + offset, source + offset, BLOCK_BYTES)
            into.changed_blocks.add(block)
            if streak[block] != _HOT:
                streak[block] = 0
    into.written = _either(blocks, held, written)
    memory = into.memory
    if armed.source is memory and isinstance(memory, BlockMemory) and 1 in cold:
        armed.source = memory if _arm(source, memory, bytes(cold), armed) else None


def _copy_changed(
    source: int, target: int, start: int, end: int, old_length: int, changed: set[int]
) -> None:
    """Copy the 4 KiB blocks of [start, end) that differ, narrowing down through 64 KiB
    pages first (a run changes a few hundred KiB spread thinly over many chunks, and each
    comparison here is a call from Python)."""
    for page in range(start, end, PAGE_BYTES):
        page_end = min(page + PAGE_BYTES, end)
        fresh = page_end > old_length
        if not fresh and _memcmp(source + page, target + page, page_end - page) == 0:
            continue
        for block in range(page, page_end, BLOCK_BYTES):
            width = min(BLOCK_BYTES, page_end - block)
            if fresh or _memcmp(source + block, target + block, width) != 0:
                ctypes.memmove(target + block, source + block, width)
                changed.add(block // BLOCK_BYTES)


def load_memory(store: wasmtime.Store, memory: wasmtime.Memory, snapshot: MemorySnapshot) -> None:
    """Copy a snapshot's bytes into the memory of a fresh instance.

    A sparse snapshot's blocks are mapped (see `BlockMemory`) or written as they are; of
    a whole one, only the 64 KiB pages that differ. The fresh image is mapped copy-on-write
    from the compiled module, so pages left alone cost neither a copy nor memory, and
    memory grown past the initial size is already zero.
    """
    if len(snapshot.memory) % PAGE_BYTES:
        raise ValueError("snapshot memory is not a whole number of pages")
    initial = memory.data_len(store)
    if len(snapshot.memory) < initial:
        raise ValueError("snapshot memory is smaller than a fresh instance's")
    fresh = _memory_address(store, memory)
    missing_pages = snapshot.pages - initial // PAGE_BYTES
    if missing_pages > 0:
        memory.grow(store, missing_pages)
    target = _memory_address(store, memory)
    if target != fresh:  # moved (copied out of its image's mapping): the image is unknown
        _FRESH_IMAGES[store] = (target, None)
    source = _address(snapshot.memory)
    if snapshot.sparse:  # the kept blocks; the others are the image's already
        assert snapshot.written is not None
        mapped_elsewhere = snapshot.mapped is not None and snapshot.mapped.live()
        if isinstance(snapshot.memory, BlockMemory) and not mapped_elsewhere:
            snapshot.mapped = _Mapping(weakref.ref(store), snapshot.memory)
            blocks = bytearray(len(snapshot.written))
            armed = _ARMED[store] = _Armed(target, blocks, snapshot.memory, [snapshot.memory])
            if not _map_runs(target, snapshot.memory, snapshot.written, armed):
                _FRESH_IMAGES[store] = (target, None)
                armed.source = None
            return
        # Written whole, one copy per run: the guest wrote each of them, so comparing first
        # would only add a read fault per block (restore + first run 1.04 -> 0.96x of a
        # cold start for JavaScript).
        for run in _RUNS.finditer(snapshot.written):
            start, end = run.start() * BLOCK_BYTES, run.end() * BLOCK_BYTES
            ctypes.memmove(target + start, source + start, end - start)
        return
    zero = _address(_ZERO_CHUNK)
    for offset in range(0, len(snapshot.memory), PAGE_BYTES):
        current = target + offset if offset < initial else zero
        if _memcmp(source + offset, current, PAGE_BYTES) != 0:
            ctypes.memmove(target + offset, source + offset, PAGE_BYTES)


def take(
    store: wasmtime.Store, instance: wasmtime.Instance, into: MemorySnapshot | None = None
) -> MemorySnapshot:
    """Copy the instance's memory and exported mutable globals (see `capture`)."""
    exports = instance.exports(store)
    memory = exports["memory"]
    assert isinstance(memory, wasmtime.Memory)
    values: dict[str, Any] = {}
    for name, item in exports.items():
        if not (name.startswith(GLOBAL_PREFIX) and isinstance(item, wasmtime.Global)):
            continue
        if item.type(store).mutable:
            values[name] = item.value(store)
    return capture(store, memory, values, into)


def restore(store: wasmtime.Store, instance: wasmtime.Instance, snapshot: MemorySnapshot) -> None:
    """Copy a snapshot into a fresh instance (its initialisers must not have run)."""
    exports = instance.exports(store)
    memory = exports["memory"]
    assert isinstance(memory, wasmtime.Memory)
    load_memory(store, memory, snapshot)
    for name, value in snapshot.globals.items():
        item = exports[name]
        assert isinstance(item, wasmtime.Global)
        item.set_value(store, value)
