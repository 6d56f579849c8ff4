"""The estimate of what a run would cost deployed on Workers: the units a run reports
(CPU time, the chunks its snapshot wrote, the files it changed), the arithmetic at the
configured prices, the `[prices]` table, and the per-sandbox total."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.result import SessionState
from workbench.api import Backend, ExecutionResult, SandboxClient
from workbench.api.costs import (
    DURABLE_OBJECT_GB,
    ROWS_PER_RUN,
    dollars_text,
    per_million_text,
    run_cost,
    sandbox_cost,
    total_cost,
)
from workbench.api.display import counted
from workbench.config import DEFAULT_PRICES_SOURCE, Config, ConfigError, Prices

PRICES = Prices(
    workers_requests_per_million=1.0,
    workers_cpu_ms_per_million=2.0,
    durable_object_requests_per_million=3.0,
    durable_object_gb_s_per_million=4.0,
    rows_written_per_million=5.0,
    source="test",
    date="2026-12-03",
)


def result(session: SessionState | None, duration_ms: float = 1000.0) -> ExecutionResult:
    return ExecutionResult("1", "python", "e", duration_ms, session=session)


def test_the_estimate_adds_each_unit_at_its_price() -> None:
    measured = run_cost(result(SessionState("resident", (), 200.0, 10, 2)), PRICES)
    assert (measured.worker_requests, measured.durable_object_requests) == (1, 2)
    assert measured.rows_written == ROWS_PER_RUN + 10 + 2 and measured.measured
    assert DURABLE_OBJECT_GB == 0.125
    # 1 request + 2 DO requests + 16 rows + 200 CPU ms + 1 s of a 0.125 GB object.
    expected = (1 * 1.0 + 2 * 3.0 + 16 * 5.0 + 200 * 2.0 + 1 * 0.125 * 4.0) / 1e6
    assert measured.usd == pytest.approx(expected)

    # A gateway's answer says nothing of CPU or snapshot: the duration stands in (an
    # upper bound) and only the context and meta rows count.
    remote = run_cost(result(None, 50.0), PRICES)
    assert (remote.cpu_ms, remote.rows_written, remote.measured) == (50.0, ROWS_PER_RUN, False)
    expected_remote = (1.0 + 6.0 + 4 * 5.0 + 50 * 2.0 + 0.05 * 0.125 * 4.0) / 1e6
    assert remote.usd == pytest.approx(expected_remote)

    total = total_cost([result(None, 50.0), None, result(None, 50.0)], PRICES)
    assert (total.runs, total.usd) == (2, pytest.approx(2 * expected_remote))


def test_amounts_read_as_people_write_them() -> None:
    assert per_million_text(0.0000310593) == "$31.06/M runs"
    assert dollars_text(0.0000310593) == "$0.000031"  # an estimate: two digits
    assert dollars_text(0.0008766386) == "$0.00088"
    assert dollars_text(0.0099) == "$0.0099"
    assert (counted(1, "run"), counted(25, "run")) == ("1 run", "25 runs")
    assert dollars_text(12.345) == "$12.35"
    assert dollars_text(0) == "$0"
    assert dollars_text(3e-12) == "$3e-12"


def test_the_prices_table(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    assert Config.load(path).prices == Prices()
    assert Prices().source == DEFAULT_PRICES_SOURCE and Prices().date == "2026-12-03"

    path.write_text("[prices]\nrows_written_per_million = 2\nsurprise = 1\n")
    config = Config.load(path)
    assert config.prices.rows_written_per_million == 2.0
    assert config.prices.workers_requests_per_million == Prices().workers_requests_per_million
    # A price of the user's, with no source given: the file is its source, of no known date.
    assert (config.prices.source, config.prices.date) == (f"{path} [prices]", "")
    assert config.unknown_keys == ["prices.surprise"]

    path.write_text('[prices]\nrows_written_per_million = 2.5\nsource = "contract"\n')
    assert Config.load(path).prices.source == "contract"

    for bad in ("-1", '"cheap"', "true", "inf", "1e308", "1000000.5"):  # 1e308: "$inf"
        path.write_text(f"[prices]\nworkers_cpu_ms_per_million = {bad}\n")
        with pytest.raises(ConfigError, match=r"prices\.workers_cpu_ms_per_million must be a"):
            Config.load(path)


@pytest.mark.usefixtures("python_engine")
async def test_a_run_reports_what_it_took(backend: Backend, sandbox: SandboxClient) -> None:
    """The local backend and serve say what the estimate needs; the sandbox's total sums
    its kept runs."""
    if backend.name == "workerd":
        pytest.skip("the Worker gateway's answers carry no measurements (see the unit test)")
    interpreter = sandbox.interpreter
    context = await interpreter.create_code_context("PYTHON")
    first = await interpreter.run_code("x = 1", context=context)
    # A first snapshot writes every chunk it holds (as the store counts them then).
    (after_first,) = (await sandbox.get_info()).contexts
    assert after_first.snapshot is not None and first.session is not None
    assert first.session.snapshot_chunks == after_first.snapshot.stored_bytes >> 20
    wrote = await interpreter.run_code(
        "open('a.txt', 'w').write('a'); open('b.txt', 'w').write('b')", context=context
    )
    for answer in (first, wrote):
        state = answer.session
        assert state is not None and state.cpu_ms is not None and state.cpu_ms > 0
        assert state.snapshot_chunks is not None and state.snapshot_chunks >= 1
    assert first.session is not None and wrote.session is not None
    assert (first.session.files_changed, wrote.session.files_changed) == (0, 2)
    # A later one writes only the chunks holding a block it changed.
    info = await sandbox.get_info()
    (listed,) = info.contexts
    assert listed.snapshot is not None
    assert wrote.session.snapshot_chunks <= listed.snapshot.stored_bytes >> 20

    total = await sandbox_cost(sandbox, info, PRICES)
    assert total is not None and total.runs == 2
    each = [run_cost(answer, PRICES).usd for answer in (first, wrote)]
    assert total.usd == pytest.approx(sum(each))

    # A fork's history starts with a copy of its origin's two runs: counted once.
    fork = await interpreter.fork_code_context(context)
    third = await interpreter.run_code("y = 2", context=fork)
    total = await sandbox_cost(sandbox, await sandbox.get_info(), PRICES)
    assert total is not None and total.runs == 3
    each.append(run_cost(third, PRICES).usd)
    assert total.usd == pytest.approx(sum(each))
