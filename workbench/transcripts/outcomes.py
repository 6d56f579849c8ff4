"""What a cell's run is compared by: its logs, results and error name and message.

Timing and usage (`durationMs`, `usage`, the context's timestamps, `executionCount`) and
the workbench's boot notes differ from run to run and backend to backend by design, so
an `Outcome` leaves them out; two runs agree when their outcomes are equal.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workbench.api import ExecutionResult, ResultEntry

OUTCOME_FIELDS = ("stdout", "stderr", "results", "error")
"""The compared parts, in the order differences are named."""


@dataclass(frozen=True)
class OutcomeError:
    """The guest error's name and message (its traceback names frames and files that
    legitimately differ between hosts)."""

    name: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "message": self.message}


@dataclass(frozen=True)
class Outcome:
    """The comparable part of one execution."""

    stdout: tuple[str, ...] = ()
    stderr: tuple[str, ...] = ()
    results: tuple[ResultEntry, ...] = ()
    error: OutcomeError | None = None

    @classmethod
    def of(cls, result: ExecutionResult) -> Outcome:
        error = result.error
        return cls(
            tuple(result.stdout),
            tuple(result.stderr),
            tuple(result.results),
            None if error is None else OutcomeError(error.name, error.message),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "stdout": list(self.stdout),
            "stderr": list(self.stderr),
            "results": [entry.to_json() for entry in self.results],
            "error": None if self.error is None else self.error.to_json(),
        }


def differing_fields(expected: Outcome, actual: Outcome) -> list[str]:
    """The names of the parts (`OUTCOME_FIELDS`) in which two outcomes differ."""
    return [name for name in OUTCOME_FIELDS if getattr(expected, name) != getattr(actual, name)]


def _result_lines(entry: ResultEntry) -> list[str]:
    if entry.is_json:
        return [json.dumps(entry.json, ensure_ascii=False, sort_keys=True)]
    return (entry.text or "").split("\n")


SHOWN_OUTCOME_CHARS = 256 * 1024
"""What `outcome_lines` shows of one outcome, in characters: more than a run can print
(32 KiB of output, 64 KiB of results, an error's 2 KiB), far less than a transcript's
hand-made outcome may hold (20 MiB of it reached the terminal whole; QA)."""


def outcome_lines(outcome: Outcome) -> list[str]:
    """The outcome as `part | text` lines, the form differences are shown in (JSON
    results with sorted keys, so equal values read alike); past `SHOWN_OUTCOME_CHARS`,
    a line says how much more there is."""
    lines = [f"stdout | {line}" for line in outcome.stdout]
    lines += [f"stderr | {line}" for line in outcome.stderr]
    for entry in outcome.results:
        lines += [f"result | {line}" for line in _result_lines(entry)]
    if outcome.error is not None:
        for line in f"{outcome.error.name}: {outcome.error.message}".split("\n"):
            lines.append(f"error  | {line}")
    return _clipped(lines) or ["(no output, no result)"]


def _clipped(lines: list[str]) -> list[str]:
    budget = SHOWN_OUTCOME_CHARS
    for index, line in enumerate(lines):
        if len(line) > budget:
            rest = len(line) - budget + sum(len(later) for later in lines[index + 1 :])
            note = f"… {rest:,} more characters, more than a run prints, not shown"
            return [*lines[:index], *([line[:budget]] if budget else []), note]
        budget -= len(line)
    return lines


def unified_lines(
    expected: Sequence[str], actual: Sequence[str], expected_label: str, actual_label: str
) -> list[str]:
    """A unified diff of two outcomes' lines, with every line kept as context (outcomes
    are short and the unchanged lines say where a change is)."""
    size = max(len(expected), len(actual))
    return [
        line.rstrip("\n")
        for line in difflib.unified_diff(
            list(expected), list(actual), expected_label, actual_label, n=size, lineterm=""
        )
    ]


def changed_lines(expected: Sequence[str], actual: Sequence[str]) -> tuple[set[int], set[int]]:
    """The indices of the lines that differ, on each side (for a side-by-side view)."""
    left: set[int] = set()
    right: set[int] = set()
    # Lines repeated all over a long side are junk to the matcher: without that, 2,000
    # lines of loop output took two minutes to compare (on the UI thread).
    matcher = difflib.SequenceMatcher(a=list(expected), b=list(actual), autojunk=True)
    for tag, left_start, left_end, right_start, right_end in matcher.get_opcodes():
        if tag != "equal":
            left.update(range(left_start, left_end))
            right.update(range(right_start, right_end))
    return left, right
