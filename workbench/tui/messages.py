"""Messages that background workers post to the main screen (workers never touch widgets).

They stop there (no bubbling on to the app, which has no handler for them); each class
says `bubble=False` itself because Textual resets `bubble` for every subclass."""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.message import Message
from textual.widget import Widget

from workbench.api import (
    Backend,
    Checkpoint,
    CheckpointUsage,
    CodeContext,
    ContextInspection,
    EngineInfo,
    ExecutionResult,
    FileInfo,
    FileState,
    FileVersion,
    HistoryEntry,
    InspectedValue,
    ReadFileResult,
    RuntimeInfo,
    SandboxInfo,
    SandboxSummary,
)
from workbench.api.costs import CostTotal
from workbench.sync.events import SyncEvent, SyncReport
from workbench.transcripts import Outcome


@dataclass
class BackendOpened(Message, bubble=False):
    profile: str
    backend: Backend


@dataclass
class BackendFailed(Message, bubble=False):
    profile: str
    reason: str


@dataclass
class HealthChecked(Message, bubble=False):
    profile: str
    healthy: bool
    detail: str


@dataclass
class TokenRefused(Message, bubble=False):
    """The profile's gateway refused its token (HTTP 401): its health, which needs none,
    says nothing of that."""

    profile: str
    reason: str


@dataclass
class SandboxesLoaded(Message, bubble=False):
    sandboxes: list[SandboxSummary]
    backend: Backend
    """Whose listing it is: one that comes after a switch of profile is not shown."""
    number: int
    """The listing's place among those asked for (`ProfileConnection.list_sandboxes`): one
    answered after a later one is not shown (it would undo what that one showed)."""
    refresh: bool = False
    """A refresh's listing: what else the refresh reads, it reads of these sandboxes."""


@dataclass
class RuntimesLoaded(Message, bubble=False):
    runtimes: list[RuntimeInfo]


@dataclass
class EngineStatesLoaded(Message, bubble=False):
    engines: list[EngineInfo]


@dataclass
class EngineProgress(Message, bubble=False):
    """A local engine's preparation moved on (posted from its worker thread)."""

    language: str
    label: str
    fraction: float


@dataclass
class EnginePrepared(Message, bubble=False):
    language: str
    error: str | None


@dataclass
class EnvVarsSaved(Message, bubble=False):
    """The sandbox's env vars changed as asked: `set` keys given a value, `unset` removed."""

    sandbox_id: str
    set: int
    unset: int


@dataclass
class SandboxInfoLoaded(Message, bubble=False):
    info: SandboxInfo
    created: bool = False
    """Read after the user created it (F2): it becomes the highlighted sandbox."""


@dataclass
class DirectoryListed(Message, bubble=False):
    sandbox_id: str
    path: str
    files: list[FileInfo]


@dataclass
class FileOpened(Message, bubble=False):
    sandbox_id: str
    read: ReadFileResult
    version: FileVersion
    """The file's size and modification time as listed before the read (what a save expects)."""
    activate: bool = True
    """False for an open view read again (after a run or a sync): its tab stays where it is."""
    discard_edits: bool = False
    """True for a reload the user asked for: it replaces unsaved edits."""
    focus: bool = False
    """True for a file just created or opened from the tree: its editor takes the focus,
    to be written in."""
    opened_from: Widget | None = None
    """What had the focus when the user opened the file: once something else has it, the
    view opens behind the active tab and takes no focus (a slow read took the user away
    from what they had gone on to type in)."""
    reopened: int | None = None
    """For a file tab reopened as the profile opens, its place among them: it opens behind
    the active tab, and in the order they were open whatever order their reads end in."""
    profile: str | None = None
    """The profile it was read in: a read that ends after a switch to another profile is
    dropped (its tab would have opened, and been kept, under the new profile)."""


@dataclass
class FileGone(Message, bubble=False):
    """An open file view's file is no longer there."""

    sandbox_id: str
    path: str


@dataclass
class FileSaved(Message, bubble=False):
    sandbox_id: str
    path: str
    text: str
    version: FileVersion
    """The file's version now (its size and the write's time, its `modifiedAt`)."""


@dataclass
class FileSaveConflict(Message, bubble=False):
    """A save's precondition failed: the file changed (or went) since it was read, and
    nothing was written."""

    sandbox_id: str
    path: str
    current: FileState | None
    """What is at the path now (None: nothing)."""


@dataclass
class FileSaveSandboxGone(Message, bubble=False):
    """A save found the file's sandbox gone (the backend no longer lists it: another
    client destroyed it, or it expired): nothing was written, and no sandbox made."""

    sandbox_id: str
    path: str


@dataclass
class FileSaveFailed(Message, bubble=False):
    sandbox_id: str
    path: str
    reason: str


@dataclass
class WorkspaceChanged(Message, bubble=False):
    """The tree changed the sandbox's `/workspace` (new file or folder, delete)."""

    sandbox_id: str
    select: str | None = None
    """A path the tree's cursor goes to once it is listed."""


@dataclass
class PathRenamed(Message, bubble=False):
    sandbox_id: str
    old_path: str
    new_path: str


@dataclass
class ContextOpened(Message, bubble=False):
    sandbox_id: str
    context: CodeContext
    history: list[str]
    past: list[HistoryEntry] = field(default_factory=list)
    """The newest past runs with their results (where the server keeps them), oldest first."""
    earlier: int = 0
    """How many runs are older than `past`."""
    beside: str | None = None
    """The context whose tab its tab opens after (a fork's origin); else last."""


@dataclass
class ContextRemoved(Message, bubble=False):
    sandbox_id: str
    context_id: str


@dataclass
class CheckpointSaved(Message, bubble=False):
    context_id: str
    checkpoint: Checkpoint


@dataclass
class CheckpointNameTaken(Message, bubble=False):
    """A checkpoint is to be saved under the name of one the context has (`existing`):
    saving replaces it, so the user is asked first."""

    sandbox_id: str
    context: CodeContext
    existing: Checkpoint


@dataclass
class CheckpointsLoaded(Message, bubble=False):
    """The context's checkpoints, to pick the one to restore."""

    sandbox_id: str
    context_id: str
    checkpoints: list[Checkpoint]


@dataclass
class SandboxInfoFailed(Message, bubble=False):
    """The sandbox's info could not be read (the failure is told apart)."""

    sandbox_id: str


@dataclass
class SandboxUsageLoaded(Message, bubble=False):
    """What a sandbox's checkpoints hold of their budget (None: the backend keeps none),
    and the estimated Workers cost of the runs it keeps (None: no estimate asked for, or
    no history to estimate from)."""

    sandbox_id: str
    checkpoints: CheckpointUsage | None
    cost: CostTotal | None


@dataclass
class ContextInspected(Message, bubble=False):
    """The context's names (`inspection`), or why there are none (`failure`)."""

    context_id: str
    inspection: ContextInspection | None
    failure: str | None = None


@dataclass
class ValueInspected(Message, bubble=False):
    """A page of one name's value (`value`), or why there is none (`failure`)."""

    context_id: str
    name: str
    offset: int
    value: InspectedValue | None
    failure: str | None = None


@dataclass
class CheckpointRestored(Message, bubble=False):
    context_id: str
    checkpoint: Checkpoint


@dataclass
class RestoreCounted(Message, bubble=False):
    """The context's run count, read after its checkpoint restore was said: the restore's
    own number in the history, or more if a run came since."""

    context_id: str
    runs: int


@dataclass
class CheckpointDeleted(Message, bubble=False):
    """The context's checkpoint `name` was deleted."""

    sandbox_id: str
    context_id: str
    name: str


@dataclass
class SandboxDestroyed(Message, bubble=False):
    sandbox_id: str


@dataclass
class SandboxDestroyWaits(Message, bubble=False):
    """The sandbox's destroy waits for its turn: a run holds the sandbox (another
    client's, most likely)."""

    sandbox_id: str


@dataclass
class CellWaiting(Message, bubble=False):
    """A running cell waits for its sandbox's turn: another request holds it (another
    client's run, most likely; the backend says so after half a second); not `waits`:
    its turn came."""

    context_id: str
    waits: bool


@dataclass
class CellOutput(Message, bubble=False):
    """Lines a running cell wrote, as the backend streams them: (stream, line) pairs."""

    context_id: str
    lines: list[tuple[str, str]]


@dataclass
class CellFinished(Message, bubble=False):
    sandbox_id: str
    context_id: str
    code: str
    result: ExecutionResult | None
    failure: str | None
    label: str | None = None
    """Why the cell ran when nobody typed it (e.g. a watch run)."""


@dataclass
class RunAbandoned(Message, bubble=False):
    """A cancel interrupted no run in the context (the cell waits behind another run, or
    the backend cannot interrupt an engine), or was not answered in time; the request is
    dropped instead. `generation`: the pane's run it was asked for (a later one stays)."""

    sandbox_id: str
    context_id: str
    generation: int


@dataclass
class OperationFailed(Message, bubble=False):
    """A request failed; the app shows `reason` as an error notification."""

    title: str
    reason: str


@dataclass
class WatchEventReceived(Message, bubble=False):
    """A status event of the running folder watch."""

    watch_id: int
    event: SyncEvent


@dataclass
class WatchSynced(Message, bubble=False):
    """A watch pass finished (after the SYNCED event): the sandbox tree may refresh."""

    watch_id: int
    sandbox_id: str
    dest: str
    report: SyncReport


@dataclass
class WatchRunStarted(Message, bubble=False):
    """A watch run of the entry file started in `context_id` (its cell follows as a
    `CellFinished` labelled as a watch run)."""

    watch_id: int
    context_id: str
    code: str


@dataclass
class WatchRunAbandoned(Message, bubble=False):
    """The watch gave up its run in `context_id` (`why`: a change came, or it stopped):
    no `CellFinished` follows."""

    context_id: str
    label: str
    why: str


@dataclass
class WatchEnded(Message, bubble=False):
    """The watch worker ended: stopped, or `failure` ended it."""

    watch_id: int
    failure: str | None


@dataclass
class WatchFolderGone(Message, bubble=False):
    """The watched folder vanished (the watcher itself reports nothing for it)."""

    watch_id: int


@dataclass
class CellRerun(Message, bubble=False):
    """A cell ran again on `profile`: its recorded and its new outcome."""

    number: str
    """As `In [n]` shows it (`DocumentCell.shown_number`)."""
    here: str
    profile: str
    recorded: Outcome
    observed: Outcome
    earlier: int
    """Cells replayed before it."""
    earlier_diverged: int


@dataclass
class CellNotRerun(Message, bubble=False):
    """`profile` could not replay the cell's context, a known difference (`reason`), as
    when it runs Ruby statelessly."""

    number: str
    """As `In [n]` shows it."""
    profile: str
    reason: str


@dataclass
class CellRerunProgress(Message, bubble=False):
    """Rerun `rerun` (of cell `number` on `profile`) has replayed `replayed` of its
    `total` cells (the cell itself last); `ended` once it stops, however it stops."""

    rerun: int
    """Which rerun: one started meanwhile replaced it, and its messages are stale."""
    number: str
    profile: str
    replayed: int
    total: int
    ended: bool = False


@dataclass
class DaemonReplaced(Message, bubble=False):
    """Another local daemon answers than at the last health check (another client
    restarted it, or it exited and was started again); `note` says so, a `warning` when
    its settings or version differ."""

    profile: str
    note: str
    warning: bool


@dataclass
class DaemonNoted(Message, bubble=False):
    """Opening the local profile replaced its daemon (another version, or this
    workbench's settings at its first open); `note` is what the daemon client said."""

    note: str


@dataclass
class ContextGone(Message, bubble=False):
    """A run found its context gone (another client deleted it, or its sandbox): the run
    failed with `failure`, and the context's tab runs no more."""

    sandbox_id: str
    context_id: str
    code: str
    failure: str
    label: str | None = None


@dataclass
class ContextsGone(Message, bubble=False):
    """Contexts of open tabs that the sandbox's info no longer listed, and a listing
    since confirmed gone (another client deleted them)."""

    sandbox_id: str
    context_ids: list[str]


@dataclass
class HistoryCaughtUp(Message, bubble=False):
    """A context's history runs after run `after` (before run `before`, when given),
    read for a REPL tab to show the runs another client made (`ReplPane.catch_up`)."""

    context_id: str
    after: int
    before: int | None
    generation: int
    """The tab's generation when it asked (see `ReplPane.generation`)."""
    entries: list[HistoryEntry]
    oldest_kept: int | None
    """The oldest run the history keeps (None: it keeps none): older ones were pruned."""
