"""The user's configuration file (TOML): remote profiles, key bindings, theme.

    [profiles.staging]
    url = "https://sandbox-workbench-gateway.example.workers.dev"
    token_env = "STAGING_WORKBENCH_TOKEN"   # the token is read from this variable
    # or: token_keyring = true              # ... or from the OS keyring

Tokens are never written here unless the user explicitly asks for it (`token = ...`).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from workbench.paths import config_file

KEYRING_SERVICE = "sandbox-workbench"


class ConfigError(Exception):
    """The configuration file is unreadable or a profile is incomplete."""


@dataclass(frozen=True)
class RemoteProfile:
    name: str
    url: str
    token_env: str | None = None
    token_keyring: bool = False
    token: str | None = None
    """Only when the user opted into storing the token in the file."""

    def to_toml(self) -> dict[str, Any]:
        data: dict[str, Any] = {"url": self.url}
        if self.token_env:
            data["token_env"] = self.token_env
        if self.token_keyring:
            data["token_keyring"] = True
        if self.token:
            data["token"] = self.token
        return data

    @property
    def token_source(self) -> str:
        if self.token_env:
            return f"environment variable {self.token_env}"
        if self.token_keyring:
            return "OS keyring"
        if self.token:
            return "config file (plain text)"
        return "none"

    def resolve_token(self) -> str:
        """The bearer token (never logged or printed)."""
        if self.token_env:
            value = os.environ.get(self.token_env)
            if not value:
                raise ConfigError(
                    f"profile {self.name!r} reads its token from ${self.token_env}, "
                    "which is not set"
                )
            return value
        if self.token_keyring:
            value = keyring_get(self.name)
            if not value:
                raise ConfigError(f"no token for profile {self.name!r} in the OS keyring")
            return value
        if self.token:
            return self.token
        raise ConfigError(f"profile {self.name!r} has no token source")


@dataclass
class Config:
    profiles: dict[str, RemoteProfile] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    """Key binding overrides: binding id -> keys (e.g. "repl.run" = "ctrl+r")."""
    theme: str | None = None
    last_remote: str | None = None
    path: Path = field(default_factory=config_file)

    @classmethod
    def load(cls, path: Path | None = None) -> Config:
        path = path or config_file()
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls(path=path)
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise ConfigError(f"cannot read {path}: {error}") from error
        profiles = {}
        for name, table in (raw.get("profiles") or {}).items():
            if not isinstance(table, dict) or not isinstance(table.get("url"), str):
                raise ConfigError(f"{path}: profile {name!r} needs a url")
            profiles[name] = RemoteProfile(
                name=name,
                url=table["url"],
                token_env=table.get("token_env"),
                token_keyring=bool(table.get("token_keyring", False)),
                token=table.get("token"),
            )
        keys = {str(k): str(v) for k, v in (raw.get("keys") or {}).items()}
        ui = raw.get("ui") or {}
        return cls(profiles, keys, ui.get("theme"), ui.get("last_remote"), path)

    def save(self) -> None:
        data: dict[str, Any] = {}
        if self.profiles:
            data["profiles"] = {name: p.to_toml() for name, p in sorted(self.profiles.items())}
        if self.keys:
            data["keys"] = dict(sorted(self.keys.items()))
        ui = {k: v for k, v in (("theme", self.theme), ("last_remote", self.last_remote)) if v}
        if ui:
            data["ui"] = ui
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".toml.tmp")
        temporary.write_text(tomli_w.dumps(data), encoding="utf-8")
        os.chmod(temporary, 0o600)
        os.replace(temporary, self.path)


def keyring_available() -> bool:
    try:
        import keyring
        from keyring.backends.fail import Keyring as FailKeyring
    except ImportError:
        return False
    return not isinstance(keyring.get_keyring(), FailKeyring)


def keyring_get(profile: str) -> str | None:
    if not keyring_available():
        raise ConfigError("no OS keyring is available here; use an environment variable instead")
    import keyring

    value = keyring.get_password(KEYRING_SERVICE, profile)
    return None if value is None else str(value)


def keyring_set(profile: str, token: str) -> None:
    if not keyring_available():
        raise ConfigError("no OS keyring is available here; use --token-env instead")
    import keyring

    keyring.set_password(KEYRING_SERVICE, profile, token)
