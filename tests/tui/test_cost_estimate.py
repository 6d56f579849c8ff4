"""The Workers cost estimate in the TUI: each cell's footer, and the sandbox info's total
of the runs kept; neither without measurements (the tour's pictures)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from tests.tui.test_flows import make_app, panel_text
from tour import create_context, create_sandbox, run_cell, until_connected, wait_for
from workbench.tui.widgets.workbench_tabs import INFO_TAB

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]

FOOTER_COST = re.compile(r" · ≈ \$[\d,]+\.\d\d/M runs on Workers$")


def footer(text: str) -> str:
    return text.rstrip().splitlines()[-1]


@pytest.mark.parametrize("show_measurements", [True, False])
async def test_cells_and_the_sandbox_say_what_runs_would_cost(
    tmp_path: Path, show_measurements: bool
) -> None:
    app = make_app(tmp_path, show_measurements=show_measurements)
    main = app.main_screen
    async with app.run_test(size=(140, 40)) as pilot:
        await until_connected(pilot)
        await create_sandbox(pilot)
        repl = await create_context(pilot, "PERL")
        await run_cell(pilot, repl, "our $n = 41")
        await run_cell(pilot, repl, "$n + 1")
        transcript = repl.transcript
        starts = [*transcript.cell_start_lines, len(transcript.lines)]
        cells = [  # each cell's lines joined: a long footer wraps
            "".join(line.text for line in transcript.lines[start:end])
            for start, end in itertools.pairwise(starts)
        ]
        assert len(cells) == 2 and all("fuel " in cell for cell in cells)
        assert all(bool(FOOTER_COST.search(cell)) == show_measurements for cell in cells)

        main.show_tab(INFO_TAB)
        sandbox_id = repl.sandbox_id
        main.connection.load_sandbox_info(sandbox_id)
        if show_measurements:
            costs = main.info_panel.costs
            await wait_for(pilot, lambda: "for the 2 runs kept" in costs.get(sandbox_id, ""))
            text = " ".join(panel_text(app).split())  # the line wraps
            assert re.search(r"Cost ≈ \$[\d.e-]+ on Workers for the 2 runs kept", text)
            assert "(an estimate, not a bill; prices of 2026-12-03)" in text
        else:
            await pilot.pause(0.5)
            assert main.info_panel.costs == {} and "Cost" not in panel_text(app)
