"""`KEY=VALUE` lines as the env-var editors show them, validated as the user types."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from workbench.api import (
    ENV_KEY_PATTERN,
    EXECUTE_BODY_CAP,
    EXECUTE_BODY_ROOM,
    is_valid_env_key,
    json_payload,
)
from workbench.api.display import human_bytes


@dataclass(frozen=True)
class ParsedEnvVars:
    values: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems


def env_vars_as_text(env_vars: Mapping[str, str]) -> str:
    return "\n".join(f"{key}={value}" for key, value in env_vars.items())


def parse_env_vars_text(text: str) -> ParsedEnvVars:
    """Blank lines and `#` comments are skipped; each other line must be `KEY=VALUE`."""
    values: dict[str, str] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, separator, value = stripped.partition("=")
        key = key.strip()
        if not separator:
            problems.append(f"line {number}: expected KEY=VALUE")
        elif not is_valid_env_key(key):
            problems.append(f"line {number}: key {key!r} must match {ENV_KEY_PATTERN}")
        elif key in values:
            problems.append(f"line {number}: {key} is set twice")
        else:
            values[key] = value
    sent = len(json_payload(values)) if not problems else 0
    if sent > EXECUTE_BODY_CAP - EXECUTE_BODY_ROOM:
        # Any backend refuses such a request: said here, as the text is typed (QA: 5,000
        # variables were "✓", then refused on save as "Request too large").
        problems.append(
            f"the variables take {human_bytes(sent)} as sent; a request takes at most "
            f"{human_bytes(EXECUTE_BODY_CAP)}"
        )
    return ParsedEnvVars(values, problems)


def env_vars_update(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, str | None]:
    """The `set_env_vars` body turning `before` into `after` (None unsets a key)."""
    update: dict[str, str | None] = {key: None for key in before if key not in after}
    update.update({key: value for key, value in after.items() if before.get(key) != value})
    return update
