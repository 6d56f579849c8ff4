"""Replayable transcripts and cross-backend comparison: does code behave the same on
another backend (the one you deploy to, say)?

`Outcome` is what two runs are compared by; `Transcript` is the versioned file format
(`read_transcript` checks a file); `replay_transcript` runs one again on any backend and
`run_fresh` runs code where no earlier state leaks in. A room of its own over
`workbench.api` only (the pytest plugin, an entry point like the CLI, also opens
profiles).
"""

from workbench.transcripts.export import Export, ExportError, export_context
from workbench.transcripts.model import (
    FORMAT,
    VERSION,
    ContextSpec,
    RecordedCell,
    Transcript,
    TranscriptError,
    Workspace,
    WorkspaceFile,
    parse_transcript,
    read_transcript,
    write_private_text,
)
from workbench.transcripts.outcomes import (
    OUTCOME_FIELDS,
    Outcome,
    OutcomeError,
    changed_lines,
    differing_fields,
    outcome_lines,
    unified_lines,
)
from workbench.transcripts.replay import (
    CellReplay,
    EnginePreparer,
    ReplayError,
    ReplayReport,
    find_runtime,
    prepare_quietly,
    replay_transcript,
    run_fresh,
)

__all__ = [
    "FORMAT",
    "OUTCOME_FIELDS",
    "VERSION",
    "CellReplay",
    "ContextSpec",
    "EnginePreparer",
    "Export",
    "ExportError",
    "Outcome",
    "OutcomeError",
    "RecordedCell",
    "ReplayError",
    "ReplayReport",
    "Transcript",
    "TranscriptError",
    "Workspace",
    "WorkspaceFile",
    "changed_lines",
    "differing_fields",
    "export_context",
    "find_runtime",
    "outcome_lines",
    "parse_transcript",
    "prepare_quietly",
    "read_transcript",
    "replay_transcript",
    "run_fresh",
    "unified_lines",
    "write_private_text",
]
