"""A pytest plugin: a folder of transcripts as part of your own test suite.

    pytest --sandbox-transcripts tests/transcripts --sandbox-profile staging

collects one test per `*.json` transcript under the folder and replays it on the
profile (default `$SANDBOX_WORKBENCH_PROFILE` or `local`), in a scratch sandbox that is
destroyed afterwards; a test fails with the diff of every cell that diverged. Installed
with sandbox-workbench (entry point `pytest11`); without `--sandbox-transcripts` it
does nothing. Like the CLI it is an entry point, so it opens profiles.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from workbench.api import encodable, neutralise, one_line

if TYPE_CHECKING:
    from workbench.transcripts.replay import ReplayReport

TRANSCRIPTS_OPTION = "sandbox_transcripts"
PROFILE_OPTION = "sandbox_profile"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sandbox-workbench", "replay sandbox-workbench transcripts")
    group.addoption(
        "--sandbox-transcripts",
        dest=TRANSCRIPTS_OPTION,
        metavar="DIR",
        default=None,
        help="Replay every *.json transcript under DIR as a test.",
    )
    group.addoption(
        "--sandbox-profile",
        dest=PROFILE_OPTION,
        metavar="NAME",
        default=None,
        help="The profile to replay on (default: $SANDBOX_WORKBENCH_PROFILE or local).",
    )


def transcripts_dir(config: pytest.Config) -> Path | None:
    """The folder, absolute and without `..` (as pytest makes the paths it collects:
    `is_relative_to` compares the text of paths)."""
    value = config.getoption(TRANSCRIPTS_OPTION)
    return None if value is None else Path(os.path.abspath(value))


def replay_profile(config: pytest.Config) -> str:
    from workbench.profiles import LOCAL

    chosen = config.getoption(PROFILE_OPTION)
    return str(chosen or os.environ.get("SANDBOX_WORKBENCH_PROFILE") or LOCAL)


def pytest_configure(config: pytest.Config) -> None:
    """Collect the transcripts folder too (it need not be under the test paths)."""
    folder = transcripts_dir(config)
    if folder is None:
        return
    if not folder.is_dir():
        raise pytest.UsageError(f"--sandbox-transcripts: {folder} is not a directory")
    # Appended only when no given path holds it: pytest collects overlapping paths once,
    # from the deepest, which would leave out the rest of a path that holds the folder.
    given = [Path(os.path.abspath(arg.split("::")[0])) for arg in config.args]
    if not any(folder.is_relative_to(path) for path in given):
        config.args.append(str(folder))


def pytest_report_header(config: pytest.Config) -> str | None:
    folder = transcripts_dir(config)
    if folder is None:
        return None
    return f"sandbox transcripts: {folder} on profile {replay_profile(config)}"


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> TranscriptFile | None:
    folder = transcripts_dir(parent.config)
    if folder is None or file_path.suffix != ".json" or not file_path.is_relative_to(folder):
        return None
    file: TranscriptFile = TranscriptFile.from_parent(parent, path=file_path)
    # pytest prints a test's id as it is, on one line: a file name may hold escape
    # sequences, a newline, or bytes that are not UTF-8.
    nodeid = one_line(encodable(file.nodeid))
    if nodeid != file.nodeid:
        name = one_line(encodable(file.name))
        file = TranscriptFile.from_parent(parent, path=file_path, name=name, nodeid=nodeid)
    return file


class TranscriptFile(pytest.File):
    """One transcript file: one test that replays it."""

    def collect(self) -> list[TranscriptItem]:
        return [TranscriptItem.from_parent(self, name="replay")]


class TranscriptFailure(Exception):
    """The transcript is unreadable, cannot run on the profile, or diverged."""


class TranscriptItem(pytest.Item):
    def runtest(self) -> None:
        from workbench.api import SandboxError
        from workbench.profiles import (
            BackendUnavailableError,
            UnknownProfileError,
            open_profile_backend,
        )
        from workbench.transcripts import (
            ReplayError,
            TranscriptError,
            read_transcript,
            replay_transcript,
        )

        try:
            transcript = read_transcript(self.path)
        except TranscriptError as error:
            raise TranscriptFailure(str(error)) from None
        profile = replay_profile(self.config)

        async def replay() -> ReplayReport:
            backend = open_profile_backend(profile)
            try:
                return await replay_transcript(backend, transcript)
            finally:
                await backend.aclose()

        try:
            report = asyncio.run(replay())
        except (ReplayError, UnknownProfileError, BackendUnavailableError) as error:
            raise TranscriptFailure(f"cannot replay on {profile}: {error}") from None
        except SandboxError as error:
            raise TranscriptFailure(f"cannot replay on {profile}: {error.message}") from None
        if report.known_difference is not None:
            pytest.skip(neutralise(report.known_difference))
        if report.divergences:
            raise TranscriptFailure(divergence_text(report))

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | Any:
        if isinstance(excinfo.value, TranscriptFailure):
            # pytest prints it as it is: a transcript's or a gateway's text may hold
            # escape sequences or lone surrogates.
            return neutralise(encodable(str(excinfo.value)))
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        where = f"replay {self.path.name} on {replay_profile(self.config)}"
        return self.path, None, neutralise(encodable(where))


def divergence_text(report: ReplayReport) -> str:
    """Each diverged cell with its code and a unified diff (recorded → observed),
    neutralised: pytest prints it to the terminal as it is."""
    from workbench.transcripts import outcome_lines, unified_lines

    lines = [f"{len(report.divergences)} of {len(report.cells)} cells diverged on {report.profile}"]
    for cell in report.divergences:
        assert cell.recorded is not None
        lines += ["", f"cell {cell.number} differs ({', '.join(cell.differences)}):"]
        lines += [f"  >>> {code_line}" for code_line in cell.code.splitlines()]
        lines += unified_lines(
            outcome_lines(cell.recorded), outcome_lines(cell.observed), "recorded", report.profile
        )
    if report.unset_env_vars:
        keys = ", ".join(report.unset_env_vars)
        lines += ["", f"not set (no recorded value): {keys}"]
    return "\n".join(lines)  # neutralised by `repr_failure`
