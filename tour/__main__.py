"""`python -m tour [DIR]`: SVGs of the main screens for the README.

Each tour state (`tour`) is reached from a fresh temp data dir and saved
as `DIR/<state>.svg` (default `screenshots/`), at 120x40.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from tour import TOUR_STATES, fixed_context_ids, settle, tour_app

SIZE = (120, 40)


async def save_state(name: str, directory: Path) -> Path:
    with tempfile.TemporaryDirectory() as scratch, fixed_context_ids():
        app = tour_app(Path(scratch) / "data")
        async with app.run_test(size=SIZE) as pilot:
            await TOUR_STATES[name](pilot)
            await settle(pilot)
            return Path(app.save_screenshot(f"{name}.svg", str(directory)))


async def save_all(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    return [await save_state(name, directory) for name in TOUR_STATES]


def main() -> None:
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("screenshots")
    for path in asyncio.run(save_all(directory)):
        print(path)


if __name__ == "__main__":
    main()
