"""What fuel in the reference's units costs, and why it could not be wasmtime fuel scaled.

Each language's prepared engine is compiled three ways in this run: with no metering at
all (the baseline), with wasmtime's own fuel (what we counted before), and with the ticks
`engines.metering` inserts (what we count now). Each workload then runs warm on one
instance of each, and the table prints the median time against the baseline, the ticks,
and wasmtime's fuel per tick (the factor a calibration would have had to hold within
10%). Run: `python -m benchmarks metering [language ...]`.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import wasmtime

import engines.components.engine
import engines.components.guest
import engines.host
from benchmarks.engines import each_language
from engines import metering
from engines.cache import EngineCache
from engines.host import IDLE_EPOCH_DEADLINE, OutputCapture
from engines.language import Artifact, GuestInstance, LanguageEngine
from engines.proto import envelope_pb2
from engines.registry import LANGUAGES, language_engine
from engines.vfs import VirtualFS
from workbench.core.workspace import GUEST_LIMITS

WORKLOADS: dict[str, dict[str, str]] = {
    "python": {
        "1+1": "1+1",
        "loop": "for i in range(200000):\n    pass",
        "recursion": "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\nfib(20)",
        "strings": "len(''.join(str(i).upper() for i in range(20000)))",
        "dicts": "d = {str(i): i for i in range(20000)}\nsum(d[str(i)] for i in range(20000))",
        "compile": "exec(compile('\\n'.join(f'def f{i}(x):\\n    return x + {i}' "
        "for i in range(300)), 'm', 'exec'), {})",
    },
    "javascript": {
        "1+1": "1+1",
        "loop": "for (let i = 0; i < 200000; i++) {}",
        "recursion": "function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2) }\nfib(20)",
        # var: each workload runs many times in one context, where a let or const could
        # not be declared again (spec 7.8).
        "strings": "var s = ''; for (let i = 0; i < 20000; i++) s += String(i).toUpperCase(); "
        "s.length",
        "dicts": "var d = new Map(); for (let i = 0; i < 20000; i++) d.set(String(i), i); "
        "var t = 0; for (let i = 0; i < 20000; i++) t += d.get(String(i)); t",
        "compile": "new Function(Array.from({length: 300}, (_, i) => "
        "`function f${i}(x) { return x + ${i} }`).join('\\n'))(); 1",
        "intl": "new Intl.NumberFormat('de-DE', {style: 'currency', currency: 'EUR'})"
        ".format(1234.5)",
    },
    "perl": {
        "1+1": "1+1",
        "loop": "for my $i (1..200000) {}",
        "recursion": "sub fib { my $n = shift; $n < 2 ? $n : fib($n - 1) + fib($n - 2) } fib(20)",
        "strings": "my $s = ''; $s .= uc($_) for 1..20000; length $s",
        "dicts": "my %d; $d{$_} = $_ for 1..20000; my $t = 0; $t += $d{$_} for 1..20000; $t",
        "compile": "eval join '', map { \"sub f$_ { \\$_[0] + $_ }\" } 1..300; 1",
    },
    "ruby": {
        "1+1": "1+1",
        "loop": "i = 0; while i < 200000; i += 1; end",
        "recursion": "def fib(n) = n < 2 ? n : fib(n - 1) + fib(n - 2)\nfib(20)",
        "strings": "s = +''; 20000.times { |i| s << i.to_s.upcase }; s.size",
        "dicts": "d = {}; 20000.times { |i| d[i.to_s] = i }; t = 0; "
        "20000.times { |i| t += d[i.to_s] }; t",
        "compile": 'eval((1..300).map { |i| "def f#{i}(x) = x + #{i}\\n" }.join); 1',
    },
}
VARIANTS = ("none", "wasmtime fuel", "ticks")
REPEAT = 15
PLENTY = 10**15


def _no_tick(memory: int) -> bytes:
    return b""


@contextlib.contextmanager
def _variant(variant: str) -> Iterator[wasmtime.Engine]:
    """An engine for `variant`, with compiling and store-making patched to match."""
    config = wasmtime.Config()
    config.epoch_interruption = True
    config.wasm_multi_memory = True
    wasmtime_fuel = config.consume_fuel = variant == "wasmtime fuel"
    real_new_store = engines.host.new_store

    def new_store(engine: wasmtime.Engine, **options: Any) -> wasmtime.Store:
        store = real_new_store(engine, **options)
        if wasmtime_fuel:
            store.set_fuel(PLENTY)
        return store

    patches: list[contextlib.AbstractContextManager[Any]] = [
        mock.patch.object(module, "new_store", new_store)
        for module in (engines.host, engines.components.engine, engines.components.guest)
    ]
    if variant != "ticks":  # the counter's memory stays (the adapters look it up)
        patches.append(mock.patch.object(metering, "tick", _no_tick))
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        yield wasmtime.Engine(config)


class _Guest:
    """One warm instance of one variant."""

    def __init__(
        self, spec: LanguageEngine, engine: wasmtime.Engine, artifact: Artifact, fuel: bool
    ) -> None:
        self.output = OutputCapture()
        self.store = spec.new_store(engine, self.output, workspace=VirtualFS(GUEST_LIMITS))
        self.guest: GuestInstance = spec.instantiate(engine, artifact, self.store)
        self.fuel = fuel
        self.language = spec.language

    def call(self, label: str, payload: bytes) -> tuple[float, int, int]:
        """ms, ticks and wasmtime fuel of one call."""
        self.output.reset()
        self.guest.meter.remaining = PLENTY
        fuel_before = self.store.get_fuel() if self.fuel else 0
        self.store.set_epoch_deadline(1)
        started = time.perf_counter()
        response = envelope_pb2.ExecuteResponse.FromString(self.guest.call(payload))
        elapsed_ms = (time.perf_counter() - started) * 1000
        self.store.set_epoch_deadline(IDLE_EPOCH_DEADLINE)
        if response.HasField("error"):
            raise RuntimeError(f"{self.language} {label}: {response.error.message}")
        fuel = fuel_before - self.store.get_fuel() if self.fuel else 0
        return elapsed_ms, PLENTY - self.guest.meter.remaining, fuel


def bench_language(language: str) -> None:
    spec = language_engine(language)
    cache = EngineCache(spec)
    cache.prepare()
    guests: dict[str, _Guest] = {}
    with tempfile.TemporaryDirectory(prefix="sbw-metering-") as scratch:
        for variant in VARIANTS:
            with _variant(variant) as engine:
                target = Path(scratch) / f"{variant.replace(' ', '-')}{spec.compiled_suffix}"
                started = time.perf_counter()
                spec.compile(engine, cache.wasm_path, target, lambda label, fraction: None)
                compiled_s = time.perf_counter() - started
                artifact = spec.load_compiled(engine, target)
                guests[variant] = _Guest(spec, engine, artifact, variant == "wasmtime fuel")
            print(f"  [{language}] compiled {variant!r} in {compiled_s:.1f} s")
    print(f"\n[{language}] {spec.engine}; budget {spec.fuel:,} ticks")
    print(
        f"  {'workload':<10} {'none ms':>9} {'wasmtime fuel':>14} {'ticks':>9} "
        f"{'ticks used':>12} {'wasmtime fuel/tick':>19}"
    )
    per_tick = []
    for label, code in WORKLOADS[language].items():
        request = envelope_pb2.ExecuteRequest(code=code, session=True, cwd="/workspace")
        payload = request.SerializeToString()
        samples: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
        for _ in range(2):  # warm up
            for guest in guests.values():
                guest.call(label, payload)
        for _ in range(REPEAT):  # in turns, so that the machine's load falls on all three
            for variant, guest in guests.items():
                elapsed_ms, ticks_used, fuel_used = guest.call(label, payload)
                samples[variant].append(elapsed_ms)
                if variant == "ticks":
                    ticks = ticks_used
                elif variant == "wasmtime fuel":
                    fuel = fuel_used
        base_ms, fuel_ms, ticks_ms = (statistics.median(samples[variant]) for variant in VARIANTS)
        per_tick.append(fuel / ticks)
        print(
            f"  {label:<10} {base_ms:9.3f} {fuel_ms / base_ms:13.2f}x {ticks_ms / base_ms:8.2f}x "
            f"{ticks:12,} {fuel / ticks:19.1f}"
        )
    for guest in guests.values():
        guest.store.close()
    print(f"  wasmtime fuel per tick varies {max(per_tick) / min(per_tick):.1f}x across these")


def main(argv: list[str] | None = None) -> None:
    each_language(bench_language, argv or LANGUAGES)


if __name__ == "__main__":
    main(sys.argv[1:])
