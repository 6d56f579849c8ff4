"""Profiles added or removed from a shell while the workbench runs: the lists of profiles
(F9, alt+v, the palette) read the config file again when it changed; a broken file is
an error notification, never a crash."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from textual.widgets import OptionList

from tests.tui.test_flows import Notifications, make_app
from tour import until_connected, wait_for
from workbench.config import Config, RemoteProfile
from workbench.paths import config_file
from workbench.tui.app import WorkbenchApp
from workbench.tui.palette_commands import workbench_commands
from workbench.tui.screens.profile_picker_screen import ProfilePickerScreen

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("tui_dirs", "perl_engine")]


def add_profile(name: str) -> None:
    """What `sandbox-workbench profiles add` does to the file."""
    config = Config.load()
    config.profiles[name] = RemoteProfile(name, "http://127.0.0.1:9", token="t0ken")
    config.save()


def picker_names(app: WorkbenchApp) -> list[str]:
    options = app.screen.query_one("#profiles", OptionList)
    return [str(options.get_option_at_index(i).id) for i in range(options.option_count)]


def switch_titles(app: WorkbenchApp) -> list[str]:
    return [c.title for c in workbench_commands(app) if c.title.startswith("Switch to profile")]


async def test_a_profile_added_from_a_shell_is_listed_and_a_broken_file_is_notified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(tmp_path)
    notes = Notifications(app, monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        await until_connected(pilot)
        assert switch_titles(app) == []
        add_profile("staging")
        await pilot.press("f9")
        await wait_for(pilot, lambda: isinstance(app.screen, ProfilePickerScreen))
        assert picker_names(app) == ["local", "staging"]
        await pilot.press("escape")
        assert switch_titles(app) == ["Switch to profile staging"]

        path = config_file()
        path.write_text("[profiles.broken\n", encoding="utf-8")
        os.utime(path, ns=(1, 1))  # a change of its mtime, whatever the clock's resolution
        await pilot.press("f9")
        await wait_for(pilot, lambda: isinstance(app.screen, ProfilePickerScreen))
        assert picker_names(app) == ["local", "staging"]  # the config read last
        errors = notes.errors()
        assert len(errors) == 1 and errors[0].startswith("Cannot read the config: ")
        await pilot.press("escape")
        assert switch_titles(app) == ["Switch to profile staging"]
        assert len(notes.errors()) == 1  # once per change of the file

        path.unlink()
        add_profile("dev")  # fixed: read again
        await wait_for(pilot, lambda: switch_titles(app) == ["Switch to profile dev"])
        assert app.is_running
