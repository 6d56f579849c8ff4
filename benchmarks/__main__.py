"""Run all benchmarks (`python -m benchmarks`) or some (`python -m benchmarks engines`)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def available() -> list[str]:
    return sorted(
        module.name
        for module in pkgutil.iter_modules([str(Path(__file__).parent)])
        if not module.name.startswith("_")
    )


def main(argv: list[str]) -> int:
    names = argv or available()
    unknown = sorted(set(names) - set(available()))
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(available())}")
        return 2
    for name in names:
        print(f"== {name} ==")
        importlib.import_module(f"benchmarks.{name}").main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
