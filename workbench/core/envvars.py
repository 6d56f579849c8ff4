"""Environment-variable validation per entry point (spec 2.2.1, 2.3, 2.4.1-2.4.3, 10).

Each validator takes the whole parsed JSON body so it can tell an absent ``envVars``
key (allowed) from an explicit JSON ``null`` (rejected: "envVars must be an object").
Failures raise ``ValidationFailedError`` (400) with the exact spec messages. Entries
are checked in JavaScript ``Object.entries`` order (integer-like keys first), so the
first reported problem matches the real system's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from workbench.protocol.errors import ErrorCode, ValidationFailedError, error_response

__all__ = [
    "ENV_KEY_PATTERN",
    "apply_env_update",
    "context_env_vars",
    "env_request_vars",
    "execute_env_vars",
    "interpreter_env_vars",
    "is_valid_env_key",
    "js_entries",
    "layer_env",
    "runtime_env_vars",
]

ENV_KEY_PATTERN: Final = "^[A-Za-z_][A-Za-z0-9_]*$"
_KEY_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ARRAY_INDEX_RE: Final = re.compile(r"0|[1-9][0-9]*")


def _fail(message: str) -> ValidationFailedError:
    return ValidationFailedError(
        error_response(ErrorCode.VALIDATION_FAILED, message, http_status=400)
    )


def is_valid_env_key(key: object) -> bool:
    """True when ``key`` matches ``^[A-Za-z_][A-Za-z0-9_]*$``."""
    return isinstance(key, str) and _KEY_RE.fullmatch(key) is not None


def js_entries(obj: Mapping[str, object]) -> list[tuple[str, object]]:
    """Entries in JavaScript property order: array-index keys ascending, then insertion."""
    index_keys = [
        k for k in obj if _ARRAY_INDEX_RE.fullmatch(k) is not None and int(k) < 4294967295
    ]
    if not index_keys:
        return list(obj.items())
    idx = set(index_keys)
    ordered = sorted(index_keys, key=int) + [k for k in obj if k not in idx]
    return [(k, obj[k]) for k in ordered]


def _object(body: Mapping[str, object]) -> Mapping[str, object] | None:
    if "envVars" not in body:
        return None
    raw = body["envVars"]
    if not isinstance(raw, dict):
        raise _fail("envVars must be an object")
    return raw


def runtime_env_vars(body: Mapping[str, object]) -> dict[str, str] | None:
    """Runtime ``POST /execute`` (2.2.1 rows 11-12): lenient.

    ``null`` values are skipped, non-string values rejected, then keys that do not
    match the key regex are silently dropped. ``None`` when ``envVars`` is absent.
    """
    raw = _object(body)
    if raw is None:
        return None
    out: dict[str, str] = {}
    for key, value in js_entries(raw):
        if value is None:
            continue
        if not isinstance(value, str):
            raise _fail("envVars values must be strings")
        if is_valid_env_key(key):
            out[key] = value
    return out


def _strict(raw: Mapping[str, object], *, allow_null: bool) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for key, value in js_entries(raw):
        if not is_valid_env_key(key):
            raise _fail(f"Invalid envVars key: {key}")
        if value is None and allow_null:
            out[key] = None
            continue
        if not isinstance(value, str):
            raise _fail("envVars values must be strings")
        out[key] = value
    return out


def execute_env_vars(body: Mapping[str, object]) -> dict[str, str | None] | None:
    """Sandbox ``POST /execute`` (2.4.1 step 3): strict keys, string or ``null`` values."""
    raw = _object(body)
    return None if raw is None else _strict(raw, allow_null=True)


def context_env_vars(body: Mapping[str, object]) -> dict[str, str] | None:
    """Sandbox ``POST /contexts`` (2.4.2 step 3): strict keys, strings only (no ``null``)."""
    raw = _object(body)
    if raw is None:
        return None
    return {k: v for k, v in _strict(raw, allow_null=False).items() if v is not None}


def env_request_vars(body: Mapping[str, object]) -> dict[str, str | None]:
    """Sandbox ``POST /env`` (2.4.3): required, strict keys, string or ``null`` values."""
    raw = _object(body)
    if raw is None:
        raise _fail("envVars is required")
    return _strict(raw, allow_null=True)


def interpreter_env_vars(body: Mapping[str, object]) -> dict[str, str]:
    """Interpreter RPC args (2.3 step 1): optional object of strings, no key filtering."""
    raw = _object(body)
    if raw is None:
        return {}
    out: dict[str, str] = {}
    for key, value in js_entries(raw):
        if not isinstance(value, str):
            raise _fail("envVars values must be strings")
        out[key] = value
    return out


def layer_env(
    sandbox: Mapping[str, str | None] | None,
    context: Mapping[str, str | None] | None,
    call: Mapping[str, str | None] | None,
) -> dict[str, str]:
    """Effective guest env (10.3): sandbox, then context, then call; ``None`` removes a key."""
    merged: dict[str, str | None] = {}
    for layer in (sandbox, context, call):
        if layer:
            merged.update(layer)
    return {k: v for k, v in merged.items() if v is not None}


def apply_env_update(
    current: Mapping[str, str], update: Mapping[str, str | None]
) -> dict[str, str]:
    """``setEnvVars`` (2.4.3): ``None`` deletes a key, every other value is set."""
    out = dict(current)
    for key, value in update.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out
