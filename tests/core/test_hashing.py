"""hash_bytes against hand-computed vectors (spec 6.4)."""

import os
import time

from workbench.core.workspace import hash_bytes

M = 0xFFFFFFFF


def test_empty() -> None:
    # h1 = offset basis; h2 = 0x01000193 ^ 0
    assert hash_bytes(b"") == "811c9dc5" + "01000193"


def test_single_byte_by_hand() -> None:
    # "a" = 0x61. h1 is the well-known FNV-1a-32 of "a": 0xe40c292c.
    # h2 = ((0x01000193 ^ 1) + 0x61) * 0x85EBCA6B mod 2^32 = 0x010001F3 * 0x85EBCA6B
    # 0x010001F3 = 2^24 + 0x1F3: (0x6B << 24) + 0x1F3 * 0x85EBCA6B (= 0x1050A9B8E91)
    # = 0x6B000000 + 0x0A9B8E91 (mod 2^32) = 0x759B8E91
    assert (0x010001F3 * 0x85EBCA6B) & M == 0x759B8E91
    assert hash_bytes(b"a") == "e40c292c" + "759b8e91"


def test_fnv_known_values() -> None:
    assert hash_bytes(b"foobar")[:8] == "bf9cf968"  # FNV-1a-32("foobar")


def test_matches_definition_and_types() -> None:
    def ref(data: bytes) -> str:
        h1, h2 = 0x811C9DC5, (0x01000193 ^ len(data)) & M
        for b in data:
            h1 = ((h1 ^ b) * 0x01000193) & M
            h2 = ((h2 + b) * 0x85EBCA6B) & M
        return f"{h1:08x}{h2:08x}"

    for n in (1, 2, 255, 256, 4097):
        data = os.urandom(n)
        assert hash_bytes(data) == ref(data) == hash_bytes(bytearray(data))
    assert len(hash_bytes(b"\x00" * 300)) == 16


def test_speed_report() -> None:
    data = os.urandom(256 * 1024)
    t = time.perf_counter()
    hash_bytes(data)
    mb_s = 0.25 / (time.perf_counter() - t)
    print(f"hash_bytes: {mb_s:.1f} MB/s")
    assert mb_s > 0.5
