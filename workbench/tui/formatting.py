"""Plain-text formatting of sizes, durations, countdowns and execution footers."""

from __future__ import annotations

from workbench.api import ExecutionResult
from workbench.api.costs import per_million_text, run_cost
from workbench.api.display import human_bytes
from workbench.config import Prices

MASK = "••••••"


def human_duration_ms(milliseconds: float) -> str:
    if milliseconds < 1000:
        return f"{milliseconds:.1f} ms"
    return f"{milliseconds / 1000:.2f} s"


def countdown(remaining_ms: int) -> str:
    """`2d 03:04:05` until expiry, or `expired`."""
    if remaining_ms <= 0:
        return "expired"
    seconds = remaining_ms // 1000
    days, seconds = divmod(seconds, 86_400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    clock = f"{hours:02d}:{minutes:02d}:{seconds:02d}"
    return f"{days}d {clock}" if days else clock


def compact_count(value: int) -> str:
    """`19.5M`-style count for fuel figures."""
    for threshold, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if value >= threshold:
            return f"{value / threshold:.1f}{suffix}"
    return str(value)


def execution_footer(
    result: ExecutionResult, *, show_measurements: bool, prices: Prices | None = None
) -> str:
    """`2.0 ms · fuel 733.6k/10.0M · memory 32.0 MiB · [2]`, with `prices` what a million
    such runs would cost on Workers (an estimate); without measurements (which vary from
    run to run) the duration, fuel used and cost are left out."""
    parts = []
    if show_measurements:
        parts.append(human_duration_ms(result.duration_ms))
    if result.usage is not None:
        used = compact_count(result.usage.fuel_consumed) if show_measurements else "…"
        parts.append(f"fuel {used}/{compact_count(result.usage.fuel_limit)}")
        if result.usage.memory_bytes:  # 0: not measurable (component engines)
            parts.append(f"memory {human_bytes(result.usage.memory_bytes)}")
    if result.execution_count is not None:
        parts.append(f"[{result.execution_count}]")
    if show_measurements and prices is not None:
        cost = run_cost(result, prices)
        unmeasured = "" if cost.measured else " (its duration as CPU time)"
        parts.append(f"≈ {per_million_text(cost.usd)} on Workers{unmeasured}")
    return " · ".join(parts)
