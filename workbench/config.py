"""The user's configuration file (TOML): remote profiles, key bindings, theme, and how
the local backend differs from a default deployment.

    [profiles.staging]
    url = "https://sandbox-workbench-gateway.example.workers.dev"
    token_env = "STAGING_WORKBENCH_TOKEN"   # the token is read from this variable
    # or: token_keyring = true              # ... or from the OS keyring

    [local]
    ruby_contexts = true   # Ruby code contexts, a local extension (default false)
    file_api = false       # as a deployment with SANDBOX_FILE_API=disabled (default true)

    [prices]               # what the cost estimate charges, in US dollars (`Prices`)
    rows_written_per_million = 1.00
    source = "my contract"

Tokens are never written here unless the user explicitly asks for it (`token = ...`).
Loading checks every known key's type (a wrong one is a `ConfigError` naming the key and
the file) and lists unknown keys in `Config.unknown_keys`; saving edits the file in place
(tomlkit), so the user's comments, formatting and unknown keys survive.

Settings that come from the environment rather than the file live here too
(`parse_timeout`), so light commands can read them without loading a backend.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from math import inf
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from workbench.paths import config_file, private_config_dir, private_file

if TYPE_CHECKING:
    import tomlkit
    from tomlkit.items import Table

KEYRING_SERVICE = "sandbox-workbench"
LOCAL_PROFILE = "local"
PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
"""A profile name: it is a TOML key, a keyring entry and a word in listings and errors."""
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""The built-in profile's name, reserved in the file."""

TIMEOUT_ENV = "SANDBOX_WORKBENCH_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 30.0

_PROFILE_KEYS: dict[str, type] = {
    "url": str,
    "token_env": str,
    "token_keyring": bool,
    "token": str,
    "allow_insecure": bool,
}
_UI_KEYS: dict[str, type] = {"theme": str, "last_remote": str}
_LOCAL_KEYS: dict[str, type] = {"ruby_contexts": bool, "file_api": bool}
_PRICE_KEYS = (
    "workers_requests_per_million",
    "workers_cpu_ms_per_million",
    "durable_object_requests_per_million",
    "durable_object_gb_s_per_million",
    "rows_written_per_million",
)
DEFAULT_PRICES_SOURCE = (
    "https://developers.cloudflare.com/workers/platform/pricing/ and "
    "https://developers.cloudflare.com/durable-objects/platform/pricing/ (Workers Paid "
    "plan, past its included usage)"
)
RUBY_CONTEXTS_ENV = "SANDBOX_WORKBENCH_RUBY_CONTEXTS"
"""1: Ruby code contexts on the local backend (0: not); wins over the config file."""
FILE_API_ENV = "SANDBOX_WORKBENCH_FILE_API"
"""`disabled`: the local sandboxes' File API is off (`enabled`: on); wins over the file."""
_TOML_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a float", str: "a string"}


class ConfigError(Exception):
    """The configuration file is unreadable or invalid, or a profile is incomplete."""


MAX_TIMEOUT_S = 86_400
"""The longest execution deadline a gateway takes (`timeoutMs` up to a day)."""


def parse_timeout(value: str | None, source: str = TIMEOUT_ENV) -> float:
    """Seconds from `SANDBOX_WORKBENCH_TIMEOUT_S` (or `source`, e.g. `--timeout`); unset
    or empty means the default.

    Raises `ValueError` with a message naming the source for anything else than a
    positive number of seconds up to `MAX_TIMEOUT_S`."""
    if value is None or not value.strip():
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= MAX_TIMEOUT_S:
        raise ValueError(
            f"{source} must be a positive number of seconds, at most {MAX_TIMEOUT_S} "
            f"(a day), not {value!r}"
        )
    return seconds


HISTORY_LIMIT_ENV = "SANDBOX_WORKBENCH_HISTORY_LIMIT"
"""Execution history entries kept per context (a positive integer; default 1000)."""
MAX_RESIDENT_ENV = "SANDBOX_WORKBENCH_MAX_RESIDENT"
MEMORY_BUDGET_ENV = "SANDBOX_WORKBENCH_MEMORY_BUDGET_MIB"
DAEMON_IDLE_ENV = "SANDBOX_WORKBENCH_DAEMON_IDLE_S"
LOCAL_COUNT_ENVS = (HISTORY_LIMIT_ENV, MAX_RESIDENT_ENV, MEMORY_BUDGET_ENV)
"""The local backend's settings that are positive integers."""


def env_count(name: str, default: int) -> int:
    """`$name` as a positive integer; unset or empty means `default`. Anything else is a
    `ConfigError` naming the variable (never silently the default)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isascii() or not raw.isdigit() or int(raw) == 0:
        raise ConfigError(f"{name} must be a positive whole number, not {raw!r}")
    return int(raw)


def env_seconds(name: str, default: float) -> float:
    """`$name` as a finite number of seconds ≥ 0; unset or empty means `default`; anything
    else is a `ConfigError` naming the variable."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not 0 <= seconds < float("inf"):
        raise ConfigError(f"{name} must be a number of seconds (0 or more), not {raw!r}")
    return seconds


def check_local_environment() -> None:
    """Refuse a bad value of a local backend setting before a daemon starts with it (the
    daemon reads them only when it starts, where an error would be a line in its log)."""
    for name in LOCAL_COUNT_ENVS:
        env_count(name, 1)
    env_seconds(DAEMON_IDLE_ENV, 0.0)


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback address (where plain HTTP never leaves the machine)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def profile_problem(name: str, token_env: str | None = None) -> str | None:
    """Why `name` (with `token_env`, the variable holding its token) cannot name a profile,
    or None."""
    if name == LOCAL_PROFILE:
        return "`local` is built in; choose another profile name"
    if not PROFILE_NAME.fullmatch(name):
        return (
            f"{name!r} cannot name a profile: letters, digits, '.', '_' and '-', starting "
            "with a letter or digit, at most 63"
        )
    if token_env is not None and not ENV_NAME.fullmatch(token_env):
        return f"{token_env!r} is not an environment variable's name"
    return None


def url_problem(url: str, *, allow_insecure: bool) -> str | None:
    """Why `url` cannot be a gateway URL, or None. Plain `http://` would send the bearer
    token in clear text, so it is only for loopback hosts unless explicitly allowed."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (reading it checks it: 0-65535, digits only)
    except ValueError as error:  # `https://[::1`, `:99999`, `:abc`
        return f"{url!r} is not a valid URL ({error})"
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return f"{url!r} is not an https:// URL"
    if parts.scheme == "http" and not allow_insecure and not is_loopback_host(parts.hostname):
        return (
            f"{url} is plain http:// to a host other than this machine, which would send the "
            "token in clear text; use https:// (or --allow-insecure if you must)"
        )
    return None


def _type_name(value: object) -> str:
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return _TOML_TYPE_NAMES.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class RemoteProfile:
    name: str
    url: str
    token_env: str | None = None
    token_keyring: bool = False
    token: str | None = None
    """Only when the user opted into storing the token in the file."""
    allow_insecure: bool = False
    """Plain http:// to a non-loopback host was explicitly allowed (`--allow-insecure`)."""

    def to_toml(self) -> dict[str, Any]:
        data: dict[str, Any] = {"url": self.url}
        if self.token_env:
            data["token_env"] = self.token_env
        if self.token_keyring:
            data["token_keyring"] = True
        if self.token:
            data["token"] = self.token
        if self.allow_insecure:
            data["allow_insecure"] = True
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
                state = "which is not set" if value is None else "which is empty"
                raise ConfigError(
                    f"profile {self.name!r} reads its token from ${self.token_env}, {state}"
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


class _Checker:
    """Type checks for one file: errors name the dotted key and the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.unknown: list[str] = []

    def fail(self, key: str, expected: str, value: object) -> ConfigError:
        return ConfigError(
            f"{self.path}: {key} must be {expected}, not {_type_name(value)} ({value!r}); "
            "fix or remove it"
        )

    def table(self, raw: Mapping[str, Any], key: str) -> dict[str, Any]:
        value = raw.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(key, "a table", value)
        return value

    def known(self, table: Mapping[str, Any], prefix: str, types: Mapping[str, type]) -> None:
        for key, value in table.items():
            expected = types.get(key)
            if expected is None:
                self.unknown.append(f"{prefix}{key}")
            elif not isinstance(value, expected):
                raise self.fail(f"{prefix}{key}", _TOML_TYPE_NAMES[expected], value)


@dataclass(frozen=True)
class LocalSettings:
    """How the local backend differs from a default deployment. The data dir's daemon
    holds one set; a client that wants another replaces it (see the daemon client)."""

    ruby_contexts: bool = False
    """Ruby code contexts: a local extension (the reference runs Ruby statelessly, and
    answers 400 to creating a Ruby context)."""
    file_api: bool = True
    """The File API, which a deployment can disable (`SANDBOX_FILE_API=disabled`)."""

    def to_json(self) -> dict[str, bool]:
        return {"rubyContexts": self.ruby_contexts, "fileApi": self.file_api}

    @classmethod
    def from_json(cls, data: Any) -> LocalSettings | None:
        """The settings a daemon reported (None when it reported none it can give)."""
        if not isinstance(data, dict):
            return None
        ruby, files = data.get("rubyContexts"), data.get("fileApi")
        if not isinstance(ruby, bool) or not isinstance(files, bool):
            return None
        return cls(ruby, files)


@dataclass(frozen=True)
class Prices:
    """What the cost estimate charges, in US dollars (the `[prices]` table), and where the
    figures come from. The defaults are Cloudflare's list prices past the included usage
    of the Workers Paid plan, as read on `date`; prices a user sets have the file as their
    source and no date, unless the table gives them."""

    workers_requests_per_million: float = 0.30
    workers_cpu_ms_per_million: float = 0.02
    durable_object_requests_per_million: float = 0.15
    durable_object_gb_s_per_million: float = 12.50
    rows_written_per_million: float = 1.00
    source: str = DEFAULT_PRICES_SOURCE
    date: str = "2026-12-03"


def local_settings(config: Config | None = None) -> LocalSettings:
    """The environment's settings (`$SANDBOX_WORKBENCH_RUBY_CONTEXTS`,
    `$SANDBOX_WORKBENCH_FILE_API`), else the config file's `[local]` table, else the
    defaults; a bad value is a `ConfigError` naming it."""
    if config is None:
        try:
            config = Config.load()
        except ConfigError:
            config = Config()  # the CLI warns about it; the defaults apply
    ruby = _env_choice(RUBY_CONTEXTS_ENV, {"1": True, "0": False})
    files = _env_choice(FILE_API_ENV, {"enabled": True, "disabled": False})
    return LocalSettings(
        config.local.ruby_contexts if ruby is None else ruby,
        config.local.file_api if files is None else files,
    )


def _env_choice(name: str, choices: Mapping[str, bool]) -> bool | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    if raw not in choices:
        raise ConfigError(f"${name} must be {' or '.join(choices)}, not {raw!r}")
    return choices[raw]


def _prices(check: _Checker, table: Mapping[str, Any]) -> Prices:
    """The `[prices]` table over the defaults: each price a number from 0, `source` and
    `date` text."""
    labels = {key: value for key, value in table.items() if key not in _PRICE_KEYS}
    check.known(labels, "prices.", {"source": str, "date": str})
    values: dict[str, Any] = {}
    for key in _PRICE_KEYS:
        if key not in table:
            continue
        value = table[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < inf:
            raise check.fail(f"prices.{key}", "a number from 0 (US dollars)", value)
        values[key] = float(value)
    if values or "source" in table:  # the user's own: the defaults' source and date are not
        values["source"], values["date"] = f"{check.path} [prices]", ""
    for key in ("source", "date"):
        if key in table:
            values[key] = table[key]
    return Prices(**values)


@dataclass
class Config:
    profiles: dict[str, RemoteProfile] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    """Key binding overrides: binding id -> keys (e.g. "repl.run" = "ctrl+r")."""
    theme: str | None = None
    last_remote: str | None = None
    local: LocalSettings = field(default_factory=LocalSettings)
    """The `[local]` table (read only: the user edits it)."""
    prices: Prices = field(default_factory=Prices)
    """The `[prices]` table (read only: the user edits it)."""
    path: Path = field(default_factory=config_file)
    unknown_keys: list[str] = field(default_factory=list)
    """Dotted keys in the file that the workbench does not know (kept on save)."""

    @classmethod
    def load(cls, path: Path | None = None) -> Config:
        path = path or config_file()
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls(path=path)
        except UnicodeDecodeError as error:
            raise ConfigError(f"cannot read {path}: not UTF-8 text ({error.reason})") from None
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise ConfigError(f"cannot read {path}: {error}") from None
        except RecursionError:  # the parser recurses once per level of arrays or tables
            raise ConfigError(f"cannot read {path}: it nests too deeply") from None
        check = _Checker(path)
        profiles = {}
        for name, table in check.table(raw, "profiles").items():
            if not isinstance(table, dict):
                raise check.fail(f"profiles.{name}", "a table", table)
            if name == LOCAL_PROFILE:
                raise ConfigError(f"{path}: the profile name `local` is built in; rename it")
            check.known(table, f"profiles.{name}.", _PROFILE_KEYS)
            if "url" not in table:
                raise ConfigError(f"{path}: profiles.{name} needs a url")
            profiles[name] = RemoteProfile(
                name=name,
                url=table["url"],
                token_env=table.get("token_env"),
                token_keyring=table.get("token_keyring", False),
                token=table.get("token"),
                allow_insecure=table.get("allow_insecure", False),
            )
        keys = check.table(raw, "keys")
        for key, value in keys.items():
            if not isinstance(value, str):
                raise check.fail(f'keys."{key}"', "a string", value)
        ui = check.table(raw, "ui")
        check.known(ui, "ui.", _UI_KEYS)
        local = check.table(raw, "local")
        check.known(local, "local.", _LOCAL_KEYS)
        tables = ("profiles", "keys", "ui", "local", "prices")
        prices = _prices(check, check.table(raw, "prices"))
        check.unknown[:0] = [key for key in raw if key not in tables]
        return cls(
            profiles,
            dict(keys),
            ui.get("theme"),
            ui.get("last_remote"),
            LocalSettings(local.get("ruby_contexts", False), local.get("file_api", True)),
            prices,
            path,
            check.unknown,
        )

    def save(self) -> None:
        """Write the profiles, keys and ui settings into the file, editing it in place:
        everything else in it (comments, formatting, unknown keys) stays as it was."""
        import tomlkit

        document = self._read_document()
        _sync_profiles(document, self.profiles)
        _sync_table(document, "keys", dict(sorted(self.keys.items())))
        _sync_table(document, "ui", {"theme": self.theme, "last_remote": self.last_remote})
        private_config_dir(self.path.parent)
        temporary = self.path.with_suffix(".toml.tmp")
        temporary.unlink(missing_ok=True)  # a leftover may belong to someone else
        # 0600 before anything is written (whatever the umask): the file may hold a token.
        private_file(temporary).write_text(tomlkit.dumps(document), encoding="utf-8")
        os.replace(temporary, self.path)

    def _read_document(self) -> tomlkit.TOMLDocument:
        import tomlkit
        import tomlkit.exceptions

        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return tomlkit.document()
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"cannot read {self.path}: {error}") from None
        try:
            return tomlkit.parse(text)
        except tomlkit.exceptions.ParseError as error:
            raise ConfigError(f"cannot update {self.path}, fix it first: {error}") from None


def _new_table(values: Mapping[str, Any]) -> Table:
    import tomlkit

    table = tomlkit.table()
    for key, value in values.items():
        table[key] = value
    table.add(tomlkit.nl())
    return table


def _sync_values(table: Table, wanted: Mapping[str, Any], managed: frozenset[str]) -> None:
    """Set the managed keys of `table` to `wanted` (None or absent: removed); a value that
    is already right is left untouched, with its comment."""
    for key in managed:
        value = wanted.get(key)
        if value is None:
            if key in table:
                del table[key]
        elif table.get(key) != value:
            table[key] = value


def _sync_profiles(document: tomlkit.TOMLDocument, profiles: Mapping[str, RemoteProfile]) -> None:
    import tomlkit
    from tomlkit.items import Table

    existing = document.get("profiles")
    if not isinstance(existing, Table):
        if not profiles:
            return
        existing = tomlkit.table(is_super_table=True)
        document["profiles"] = existing
    for name in [name for name in existing if name not in profiles]:
        del existing[name]
    for name, profile in sorted(profiles.items()):
        table = existing.get(name)
        if isinstance(table, Table):
            _sync_values(table, profile.to_toml(), frozenset(_PROFILE_KEYS))
        else:
            existing[name] = _new_table(profile.to_toml())


def _sync_table(document: tomlkit.TOMLDocument, name: str, values: Mapping[str, Any]) -> None:
    """Keep `document[name]` equal to `values` for the keys we manage (`keys`: all of
    them; `ui`: theme and last_remote)."""
    from tomlkit.items import Table

    table = document.get(name)
    present = {key: value for key, value in values.items() if value is not None}
    if not isinstance(table, Table):
        if present:
            document[name] = _new_table(present)
        return
    managed = frozenset(values) if name == "ui" else frozenset({*table, *values})
    _sync_values(table, values, managed)


_NO_KEYRING = (
    "no OS keyring is available here (it needs the `keyring` extra: "
    "pip install 'sandbox-workbench[keyring]', and a keyring service)"
)


def keyring_available() -> bool:
    try:
        import keyring
        from keyring.backends.fail import Keyring as FailKeyring
    except ImportError:
        return False
    try:
        return not isinstance(keyring.get_keyring(), FailKeyring)
    except Exception:  # a keyring backend that fails to load means no keyring
        return False


def _keyring_failed(action: str, error: Exception) -> ConfigError:
    detail = str(error) or type(error).__name__
    return ConfigError(f"the OS keyring failed to {action}: {detail}")


def keyring_get(profile: str) -> str | None:
    if not keyring_available():
        raise ConfigError(f"{_NO_KEYRING}; use an environment variable instead")
    import keyring

    try:
        value = keyring.get_password(KEYRING_SERVICE, profile)
    except Exception as error:  # keyring backends raise their own error types
        raise _keyring_failed(f"read the token of profile {profile!r}", error) from error
    return None if value is None else str(value)


def keyring_set(profile: str, token: str) -> None:
    if not keyring_available():
        raise ConfigError(f"{_NO_KEYRING}; use --token-env instead")
    import keyring

    try:
        keyring.set_password(KEYRING_SERVICE, profile, token)
    except Exception as error:  # keyring backends raise their own error types
        raise _keyring_failed(f"store the token of profile {profile!r}", error) from error


def keyring_delete(profile: str) -> bool:
    """Delete the profile's token from the OS keyring; False if there was none."""
    if not keyring_available():
        raise ConfigError(_NO_KEYRING)
    import keyring
    import keyring.errors

    try:
        keyring.delete_password(KEYRING_SERVICE, profile)
    except keyring.errors.PasswordDeleteError:
        return False
    except Exception as error:  # keyring backends raise their own error types
        raise _keyring_failed(f"delete the token of profile {profile!r}", error) from error
    return True
