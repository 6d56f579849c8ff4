"""What a run would cost deployed on Cloudflare Workers: an estimate from the inputs the
reference's cost design names (requests, the Durable Object rows its snapshot writes, CPU
time) plus the duration of the Durable Object the guest runs in, at the `[prices]` of the
config file.

A run of a context is one request to the gateway Worker (the runtime Worker behind it is
reached over a service binding, which bills no request) and two Durable Object requests
(the sandbox's object and its interpreter's). It writes the 1 MiB chunks of its snapshot
(spec 7.7), a row per changed file, and the context and meta rows of both objects (spec
2.6). Its CPU time is charged at the Workers price (the reference's cost design names it,
and its engines run under a CPU limit) and so is the interpreter's Durable Object, for
its 128 MB over the run's wall time and its snapshot's: which of the two Cloudflare bills
for the guest's work depends on where the engine runs, so the estimate errs high.
Included usage and the plan's monthly fee are left out, as are storage and rows read:
this is the marginal cost of one more such run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from workbench.api.client import SandboxClient
from workbench.config import Prices
from workbench.protocol.types import ExecutionResult, SandboxInfo

WORKER_REQUESTS_PER_RUN: Final = 1
DURABLE_OBJECT_REQUESTS_PER_RUN: Final = 2
ROWS_PER_RUN: Final = 4
"""Besides snapshot chunks and files: the context and meta rows of both objects."""
DURABLE_OBJECT_GB: Final = 0.125
"""Durable Object duration is billed for 128 MB, whatever the object uses."""
ESTIMATE_NOTE: Final = "an estimate, not a bill"


@dataclass(frozen=True)
class RunCost:
    """One run's billable units and their price."""

    worker_requests: int
    durable_object_requests: int
    rows_written: int
    cpu_ms: float
    duration_ms: float
    usd: float
    measured: bool
    """The workbench's backend measured the run (its CPU time, what its snapshot wrote).
    False for a gateway's answer: the run's duration stands in for its CPU time (an upper
    bound), and only the context and meta rows are counted."""


def run_cost(result: ExecutionResult, prices: Prices) -> RunCost:
    """The estimate for a run like `result`, from what its answer says."""
    state = result.session
    cpu_ms = state.cpu_ms if state is not None and state.cpu_ms is not None else None
    chunks = state.snapshot_chunks if state is not None else None
    files = state.files_changed if state is not None else 0
    rows = ROWS_PER_RUN + (chunks or 0) + files
    snapshot_ms = result.context.snapshot_ms if result.context is not None else None
    duration_ms = max(0.0, result.duration_ms) + max(0.0, snapshot_ms or 0.0)
    cpu = max(0.0, result.duration_ms) if cpu_ms is None else cpu_ms
    usd = (
        WORKER_REQUESTS_PER_RUN * prices.workers_requests_per_million
        + DURABLE_OBJECT_REQUESTS_PER_RUN * prices.durable_object_requests_per_million
        + rows * prices.rows_written_per_million
        + cpu * prices.workers_cpu_ms_per_million
        + duration_ms / 1000 * DURABLE_OBJECT_GB * prices.durable_object_gb_s_per_million
    ) / 1_000_000
    return RunCost(
        WORKER_REQUESTS_PER_RUN,
        DURABLE_OBJECT_REQUESTS_PER_RUN,
        rows,
        cpu,
        duration_ms,
        usd,
        cpu_ms is not None,
    )


@dataclass(frozen=True)
class CostTotal:
    """The estimate for a set of runs (a sandbox's kept history)."""

    runs: int
    usd: float


def total_cost(results: Iterable[ExecutionResult | None], prices: Prices) -> CostTotal:
    """The summed estimate of the runs that have a result."""
    costs = [run_cost(result, prices).usd for result in results if result is not None]
    return CostTotal(len(costs), sum(costs))


async def sandbox_cost(
    sandbox: SandboxClient, info: SandboxInfo, prices: Prices
) -> CostTotal | None:
    """The estimate for the runs the sandbox's contexts keep in their history; None when
    the backend keeps no history of the runs it had (a Worker gateway). A context whose
    history is gone (deleted since the info was read) adds nothing. A fork's history
    begins with a copy of its origin's runs: each run counts once, under the context it
    ran in (its result says which)."""
    runs: dict[tuple[str, int], ExecutionResult | None] = {}
    kept = missing = False
    for context in info.contexts:
        history = await sandbox.interpreter.history(context.id)
        kept = kept or bool(history)
        missing = missing or (context.executions > 0 and not history)
        for entry in history:
            ran_in = entry.result.context if entry.result is not None else None
            runs[(context.id if ran_in is None else ran_in.id, entry.seq)] = entry.result
    if missing and not kept:
        return None
    return total_cost(runs.values(), prices)


def per_million_text(usd: float) -> str:
    """A run's estimate as what a million such runs cost: `$0.49/M runs`."""
    return f"${usd * 1_000_000:,.2f}/M runs"


def dollars_text(usd: float) -> str:
    """An amount in dollars, below a cent to two significant digits (an estimate has no
    more): `$0.0000012`."""
    if usd == 0:
        return "$0"
    if usd >= 0.01:
        return f"${usd:,.2f}"
    if usd < 1e-9:
        return f"${usd:.2g}"
    decimals = 1 - math.floor(math.log10(usd))
    return f"${usd:.{decimals}f}"
