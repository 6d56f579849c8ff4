"""Sandbox id rules (spec 8.1), with the exact validator messages, and the rule of a
checkpoint's name (an extension)."""

from __future__ import annotations

import re
from typing import Final

from workbench.protocol.errors import ErrorCode, ValidationFailedError, error_response

__all__ = [
    "CHECKPOINT_NAME_RULE",
    "RESERVED_SANDBOX_IDS",
    "SANDBOX_ID_PATTERN",
    "checkpoint_name_problem",
    "normalize_id",
    "sandbox_id_error",
    "validate_sandbox_id",
]

SANDBOX_ID_PATTERN: Final = "^[A-Za-z0-9._-]{1,63}$"
_ID_RE: Final = re.compile(r"[A-Za-z0-9._-]{1,63}")
RESERVED_SANDBOX_IDS: Final = frozenset(
    {"www", "api", "admin", "root", "system", "cloudflare", "workers"}
)


_CHECKPOINT_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
CHECKPOINT_NAME_RULE: Final = (
    "A checkpoint name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
)


def checkpoint_name_problem(name: str) -> str | None:
    """Why `name` cannot name a checkpoint (`CHECKPOINT_NAME_RULE`), or None."""
    return None if _CHECKPOINT_NAME.fullmatch(name) else CHECKPOINT_NAME_RULE


_RESTORE_COMMENTS: Final = {"javascript": "//"}
"""How a restore's history entry comments itself out, by language (the default: `#`)."""
_RESTORE_NOTE = re.compile(r"(?:#|//) restored checkpoint ([A-Za-z0-9][A-Za-z0-9._-]{0,63})")


def restore_note(language: str, name: str) -> str:
    """What restoring checkpoint `name` writes into a context's history: a comment of the
    context's language, so a replayed transcript runs it harmlessly."""
    return f"{_RESTORE_COMMENTS.get(language, '#')} restored checkpoint {name}"


def restored_checkpoint(code: str) -> str | None:
    """The checkpoint a history entry's code says was restored (`restore_note`), or None."""
    match = _RESTORE_NOTE.fullmatch(code)
    return None if match is None else match.group(1)


def sandbox_id_error(id: object) -> str | None:
    """The validator's message for an invalid id, or ``None`` when ``id`` is valid.

    The client raises a plain error with this message; servers answer 400.
    """
    text = id if isinstance(id, str) else str(id)
    if not isinstance(id, str) or _ID_RE.fullmatch(text) is None:
        return f'Invalid sandbox id "{text}": must match /{SANDBOX_ID_PATTERN}/'
    if text.startswith("-") or text.endswith("-"):
        return f'Invalid sandbox id "{text}": cannot start or end with a hyphen'
    if text.lower() in RESERVED_SANDBOX_IDS:
        return f"Invalid sandbox id \"{text}\": '{text}' is a reserved name"
    return None


def untravelled_id_error(where: str) -> str:
    """Why a gateway request naming the id `.` or `..` (valid ids, spec 8.1) is refused
    before it is sent: every URL parser resolves them, so the request would reach another
    route (`/v1/sandboxes/./execute`: a sandbox named `execute`). The local backend's own
    server keeps them as they are."""
    return (
        f"The ids '.' and '..' cannot travel in a gateway's URL ({where}): a sandbox or "
        "context of that id is for the local backend only"
    )


def validate_sandbox_id(id: object) -> None:
    """Raise ``ValidationFailedError`` (400) with the exact 8.1 message if ``id`` is invalid."""
    message = sandbox_id_error(id)
    if message is not None:
        raise ValidationFailedError(
            error_response(ErrorCode.VALIDATION_FAILED, message, http_status=400)
        )


def normalize_id(id: str, normalize: bool = True) -> str:
    """Apply option ``normalizeId``: lower-case the id before validation and use."""
    return id.lower() if normalize else id
