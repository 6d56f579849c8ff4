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
Loading reads only a regular file of at most 1 MiB, checks every known key's type (a wrong
one is a `ConfigError` naming the key and the file, never quoting a token) and lists
unknown keys in `Config.unknown_keys`. Saving takes a lock, reads the file again and
edits in place (tomlkit) only what the `Config` changed since it was loaded, so the
user's comments, formatting and unknown keys survive, and so do concurrent changes.

Settings that come from the environment rather than the file live here too
(`parse_timeout`), so light commands can read them without loading a backend.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import re
import stat
import tomllib
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from math import isnan
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

from workbench.paths import config_file, private_config_dir, private_file

if TYPE_CHECKING:
    import tomlkit
    from tomlkit.items import InlineTable, Table

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


MAX_COUNT = 2**31 - 1
"""The largest count a setting takes: larger ones overflowed SQLite's integers (a history
limit) long after the command that set them had started the daemon."""


def env_count(name: str, default: int) -> int:
    """`$name` as a positive integer of at most `MAX_COUNT`; unset or empty means
    `default`. Anything else is a `ConfigError` naming the variable (never silently the
    default)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    digits = raw.lstrip("0")
    if not raw.isascii() or not raw.isdigit() or not 0 < len(digits) <= 10:
        digits = "0"  # not a number, zero, or too long to convert
    if not 0 < int(digits) <= MAX_COUNT:
        raise ConfigError(
            f"{name} must be a whole number from 1 to {MAX_COUNT:,}, not {_quoted_short(raw)}"
        )
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


_AUTHORITY = re.compile(r"[^:/?#]*://([^/?#]*)")
"""What follows a URL's scheme up to its path: where `user:password@` would be."""


def shown_url(url: str) -> str:
    """`url` with any `user:password@` masked, as listings show it (a URL stored by a
    version that took credentials in it)."""
    authority = _AUTHORITY.match(url)
    if authority is None or "@" not in authority.group(1):
        return url
    start, end = authority.span(1)
    return f"{url[:start]}***@{authority.group(1).rpartition('@')[2]}{url[end:]}"


def url_problem(
    url: str, *, allow_insecure: bool, insecure_override: str | None = "--allow-insecure"
) -> str | None:
    """Why `url` cannot be a gateway URL, or None. Plain `http://` would send the bearer
    token in clear text, so it is only for loopback hosts unless explicitly allowed, by
    what `insecure_override` names (None: nothing can there)."""
    authority = _AUTHORITY.match(url)
    if authority is not None and "@" in authority.group(1):  # not quoted: it holds them
        return (
            "the URL holds credentials (user:password@): give the gateway's URL without "
            "them (the profile's token is its credential)"
        )
    if any(character.isspace() for character in url):
        return f"{url!r} has a space or a line end in it"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (reading it checks it: 0-65535, digits only)
    except ValueError as error:  # `https://[::1`, `:99999`, `:abc`
        return f"{url!r} is not a valid URL ({error})"
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return f"{url!r} is not an https:// URL"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        # Requests add their routes to the URL's path: a query or fragment broke them all.
        return f"{url!r} has a query or a fragment; give the gateway's base URL"
    if parts.scheme == "http" and not allow_insecure and not is_loopback_host(parts.hostname):
        override = f" (or {insecure_override} if you must)" if insecure_override else ""
        return (
            f"{url} is plain http:// to a host other than this machine, which would send the "
            f"token in clear text; use https://{override}"
        )
    return None


SHOWN_VALUE_CHARS = 60
"""How much of a value an error message quotes (a file's value may be megabytes long)."""


def _quoted_short(value: object) -> str:
    """`repr(value)`, cut to `SHOWN_VALUE_CHARS` with an ellipsis (a long string is cut
    before its repr is made)."""
    text = repr(value[: SHOWN_VALUE_CHARS + 1] if isinstance(value, str) else value)
    return text if len(text) <= SHOWN_VALUE_CHARS else text[:SHOWN_VALUE_CHARS] + "…"


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
        """The error for `key`'s `value`: quoted short, unless it may be a token (anything
        under a `token` key, text under any key about tokens, which may be one put in the
        wrong key, and a table or array, which may nest one: they are named by type only)."""
        lowered_key = key.lower()
        secret = (
            "token" in lowered_key.split(".")
            or ("token" in lowered_key and isinstance(value, str))
            or isinstance(value, dict | list)
        )
        shown = "" if secret else f" ({_quoted_short(value)})"
        return ConfigError(
            f"{self.path}: {key} must be {expected}, not {_type_name(value)}{shown}; "
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
class AskedLocalSettings:
    """The local settings a client asks for: each None where no flag, environment
    variable or `[local]` key says. A running daemon keeps what nobody asked to change (a
    command without `--ruby-contexts` restarted a daemon started with it, to the default)."""

    ruby_contexts: bool | None = None
    file_api: bool | None = None

    def held_by(self, settings: LocalSettings | None) -> bool:
        """Whether a daemon holding `settings` holds everything asked."""
        return settings is not None and all(
            asked is None or asked == held
            for asked, held in (
                (self.ruby_contexts, settings.ruby_contexts),
                (self.file_api, settings.file_api),
            )
        )

    def over(self, settings: LocalSettings) -> LocalSettings:
        """`settings` with what is asked in place of theirs."""
        return LocalSettings(
            settings.ruby_contexts if self.ruby_contexts is None else self.ruby_contexts,
            settings.file_api if self.file_api is None else self.file_api,
        )


MAX_PRICE = 1_000_000.0
"""The largest price per million units the `[prices]` table takes: far above any real one,
and low enough that no estimate overflows to infinity (1e308 showed "$inf")."""


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
    """The settings asked for (`asked_local_settings`) over the defaults."""
    return asked_local_settings(config).over(LocalSettings())


def asked_local_settings(config: Config | None = None) -> AskedLocalSettings:
    """The environment's settings (`$SANDBOX_WORKBENCH_RUBY_CONTEXTS`,
    `$SANDBOX_WORKBENCH_FILE_API`, which the flags set), else the config file's `[local]`
    table; a bad value is a `ConfigError` naming it."""
    if config is None:
        try:
            config = Config.load()
        except ConfigError:
            config = Config()  # the CLI warns about it; nothing is asked
    ruby = _env_choice(RUBY_CONTEXTS_ENV, {"1": True, "0": False})
    files = _env_choice(FILE_API_ENV, {"enabled": True, "disabled": False})
    return AskedLocalSettings(
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
    """The `[prices]` table over the defaults: each price a number from 0 to `MAX_PRICE`,
    `source` and `date` text."""
    labels = {key: value for key, value in table.items() if key not in _PRICE_KEYS}
    check.known(labels, "prices.", {"source": str, "date": str})
    values: dict[str, Any] = {}
    for key in _PRICE_KEYS:
        if key not in table:
            continue
        value = table[key]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 <= value <= MAX_PRICE
        ):
            raise check.fail(f"prices.{key}", "a number from 0 to 1,000,000 (US dollars)", value)
        values[key] = float(value)
    if values or "source" in table:  # the user's own: the defaults' source and date are not
        values["source"], values["date"] = f"{check.path} [prices]", ""
    for key in ("source", "date"):
        if key in table:
            values[key] = table[key]
    return Prices(**values)


@dataclass(frozen=True)
class _Written:
    """What `Config.save` writes: as the config holds it, or held it when loaded."""

    profiles: Mapping[str, RemoteProfile] = field(default_factory=dict)
    keys: Mapping[str, str] = field(default_factory=dict)
    theme: str | None = None
    last_remote: str | None = None


class _Edit(NamedTuple):
    """Set `key` of the table at `table` (its dotted path) to `value`; None removes it."""

    table: tuple[str, ...]
    key: str
    value: Any


@dataclass
class Config:
    profiles: dict[str, RemoteProfile] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    """Key binding overrides: binding id -> keys (e.g. "repl.run" = "ctrl+r")."""
    theme: str | None = None
    last_remote: str | None = None
    local: AskedLocalSettings = field(default_factory=AskedLocalSettings)
    """The `[local]` table (read only: the user edits it): None where it says nothing."""
    prices: Prices = field(default_factory=Prices)
    """The `[prices]` table (read only: the user edits it)."""
    path: Path = field(default_factory=config_file)
    unknown_keys: list[str] = field(default_factory=list)
    """Dotted keys in the file that the workbench does not know (kept on save)."""
    _loaded: _Written = field(default_factory=_Written, init=False, repr=False, compare=False)
    """The settings as loaded or last saved: `save` writes only what changed since."""

    @classmethod
    def load(cls, path: Path | None = None) -> Config:
        path = path or config_file()
        text = read_config_text(path)
        if text is None:
            return cls(path=path)
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
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
        config = cls(
            profiles,
            dict(keys),
            ui.get("theme"),
            ui.get("last_remote"),
            AskedLocalSettings(local.get("ruby_contexts"), local.get("file_api")),
            prices,
            path,
            check.unknown,
        )
        config._loaded = config._written()
        return config

    def save(self) -> None:
        """Write what changed in the profiles, keys and ui settings since `load` into the
        file as it is now (for a config not loaded: all it holds), editing it in place:
        everything else in it (comments, formatting, unknown keys, what other processes
        wrote meanwhile) stays as it was. A lock next to the file makes concurrent saves
        take turns; a symlinked file is written through to its target."""
        try:
            private_config_dir(self.path.parent)
            target = Path(os.path.realpath(self.path))
            with _locked(self.path.with_name(f"{self.path.name}.lock")):
                document, data = _read_document(target)
                edits = self._edits(data)
                _replace_file(target, _edited(target, document, data, edits))
        except OSError as error:
            raise ConfigError(f"cannot write {self.path}: {error}") from None
        self._loaded = self._written()

    def _written(self) -> _Written:
        return _Written(dict(self.profiles), dict(self.keys), self.theme, self.last_remote)

    def _edits(self, data: Mapping[str, Any]) -> list[_Edit]:
        """The edits that make `data` (the file as it is now) hold what changed here since
        `load`. A changed profile that the file has keeps its other keys."""
        before, after = self._loaded, self._written()
        edits = []
        in_file = data.get("profiles")
        for name in sorted(before.profiles.keys() | after.profiles.keys()):
            profile = after.profiles.get(name)
            if profile == before.profiles.get(name):
                continue
            if profile is None:
                edits.append(_Edit(("profiles",), name, None))
                continue
            token = profile.token
            if token is not None and not (token and is_visible_ascii(token)):
                raise ConfigError(f"the token of profile {name!r} is not stored: {_BAD_TOKEN}")
            if name not in before.profiles and isinstance(in_file, dict) and name in in_file:
                raise ConfigError(  # the check for an existing one came before the lock
                    f"profile {name!r} was added by another command meanwhile; nothing was "
                    "written (run again, with --force to replace it)"
                )
            wanted = profile.to_toml()
            if isinstance(in_file, dict) and isinstance(in_file.get(name), dict):
                edits += [_Edit(("profiles", name), key, wanted.get(key)) for key in _PROFILE_KEYS]
            else:
                edits.append(_Edit(("profiles",), name, wanted))
        for key in sorted(before.keys.keys() | after.keys.keys()):
            if before.keys.get(key) != after.keys.get(key):
                edits.append(_Edit(("keys",), key, after.keys.get(key)))
        if before.theme != after.theme:
            edits.append(_Edit(("ui",), "theme", after.theme))
        if before.last_remote != after.last_remote:
            edits.append(_Edit(("ui",), "last_remote", after.last_remote))
        return edits


MAX_CONFIG_BYTES = 1 << 20
"""The largest config file read (1 MiB): far more than any settings take."""


def read_config_text(path: Path) -> str | None:
    """The text of the config file at `path` (None: there is none), without a byte order
    mark (Windows editors start UTF-8 files with one, which TOML refuses as "Invalid
    statement"). Anything but a regular file of at most `MAX_CONFIG_BYTES` of UTF-8 is a
    `ConfigError`: it is opened without blocking (a FIFO waits for a writer) and read no
    further than that bound (a link to /dev/zero never ends)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise ConfigError(f"cannot read {path}: it is not a regular file")
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror or error}") from None
    finally:
        os.close(descriptor)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"cannot read {path}: it is larger than the limit of 1 MiB")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConfigError(f"cannot read {path}: not UTF-8 text ({error.reason})") from None


def _read_document(path: Path) -> tuple[tomlkit.TOMLDocument, dict[str, Any]]:
    """The config file as tomlkit edits it, and as data (both empty if there is none)."""
    import tomlkit
    import tomlkit.exceptions

    text = read_config_text(path)
    if text is None:
        return tomlkit.document(), {}
    try:
        return tomlkit.parse(text), tomllib.loads(text)
    except (tomlkit.exceptions.ParseError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"cannot update {path}, fix it first: {error}") from None
    except RecursionError:
        raise ConfigError(f"cannot update {path}: it nests too deeply") from None


@contextmanager
def _locked(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock_file` (created 0600 if missing, never removed:
    removing it would let two processes lock two different files)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(private_file(lock_file), flags)  # a FIFO planted there: no wait
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise ConfigError(f"cannot write the config: {lock_file} is not a regular file")
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # which releases the lock


def _edited(
    path: Path, document: tomlkit.TOMLDocument, data: dict[str, Any], edits: list[_Edit]
) -> bytes:
    """The text of `document` with `edits` made, as UTF-8. It must read back as `data`
    with the edits made and nothing else changed; a layout that tomlkit cannot edit so is
    a `ConfigError` (the file is left as it is, and no change is reported as made)."""
    import tomlkit
    import tomlkit.exceptions

    for edit in edits:
        _apply_to_data(path, data, edit)
    try:
        for edit in edits:
            _apply_to_document(document, edit)
        text = tomlkit.dumps(document)
        same = _same_data(_without_empty_tables(tomllib.loads(text)), _without_empty_tables(data))
    except (tomlkit.exceptions.TOMLKitError, tomllib.TOMLDecodeError, ValueError):
        same = False
    if not same:
        changed = ", ".join(sorted({".".join((*edit.table, edit.key)) for edit in edits}))
        raise ConfigError(
            f"cannot update {path}: {changed} cannot be changed in place in its layout "
            "(nothing was written); make the change by hand"
        )
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (from undecodable input)
        raise ConfigError(f"cannot update {path}: a value to write is not text") from None


def _apply_to_data(path: Path, data: dict[str, Any], edit: _Edit) -> None:
    table = data
    for depth, part in enumerate(edit.table):
        if part not in table and edit.value is None:
            return  # nothing to remove
        table = table.setdefault(part, {})
        if not isinstance(table, dict):
            where = ".".join(edit.table[: depth + 1])
            raise ConfigError(f"cannot update {path}: {where} is not a table; fix it first")
    if edit.value is None:
        table.pop(edit.key, None)
    else:
        table[edit.key] = edit.value


def _apply_to_document(document: tomlkit.TOMLDocument, edit: _Edit) -> None:
    """Make `edit` in `document`. A new table is added as `[name]`, or inline in an inline
    table or where the file makes its parent with dotted keys (`profiles.a.url = …`: a
    `[header]` among them would take the keys after it). A value that is already right is
    left alone, with its comment."""
    import tomlkit
    from tomlkit.items import InlineTable

    table: MutableMapping[str, Any] = document
    for part in edit.table:
        child = table.get(part)
        if child is None:
            if edit.value is None:
                return  # nothing to remove
            child = table[part] = tomlkit.table()
        if not isinstance(child, MutableMapping):
            raise ValueError(f"{part} is not a table")  # `_apply_to_data` said so first
        table = child
    if edit.value is None:
        if edit.key in table:
            del table[edit.key]
    elif isinstance(edit.value, dict):
        dotted = any(
            key is not None and key.is_dotted() and key.key in edit.table[:1]
            for key, _ in document.body
        )
        table[edit.key] = _new_table(edit.value, inline=dotted or isinstance(table, InlineTable))
    elif table.get(edit.key) != edit.value:
        table[edit.key] = edit.value


def _without_empty_tables(value: Any) -> Any:
    """TOML data less its empty tables, which hold no setting (tomlkit drops a table such
    as the `[profiles.…]` headers' parent when its last child goes)."""
    if isinstance(value, dict):
        pruned = {key: _without_empty_tables(item) for key, item in value.items()}
        return {key: item for key, item in pruned.items() if item != {}}
    if isinstance(value, list):
        return [_without_empty_tables(item) for item in value]
    return value


def _same_data(left: object, right: object) -> bool:
    """Equal TOML data, NaN being equal to itself (a file may hold `nan`)."""
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same_data(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(_same_data, left, right))
    if isinstance(left, float) and isinstance(right, float) and isnan(left) and isnan(right):
        return True
    return type(left) is type(right) and left == right


def _replace_file(target: Path, data: bytes) -> None:
    """Write `data` into a new file next to `target` and rename it over `target`: readers
    see the old file or the new one, never a part of one. The new file is private (it may
    hold a token) and removed again if anything fails."""
    import tempfile

    descriptor, temporary = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".tmp", dir=target.parent
    )
    try:
        with os.fdopen(descriptor, "wb") as handle:
            os.fchmod(descriptor, 0o600)  # whatever the umask
            handle.write(data)
            handle.flush()
            os.fsync(descriptor)
        os.replace(temporary, target)
    except BaseException:
        with suppress(OSError):
            os.unlink(temporary)
        raise


_BAD_TOKEN = "a token is printable ASCII without spaces (it is sent as an HTTP bearer token)"


def is_visible_ascii(token: str) -> bool:
    """A bearer token as a header carries it verbatim: whitespace would be trimmed and
    other characters mangled or refused."""
    return all("!" <= character <= "~" for character in token)


def _new_table(values: Mapping[str, Any], *, inline: bool) -> Table | InlineTable:
    """A table of `values`: `[name]` with a blank line after it, or `{ … }` if `inline`."""
    import tomlkit

    if inline:
        table: Table | InlineTable = tomlkit.inline_table()
        table.update(values)
        return table
    table = tomlkit.table()
    table.update(values)
    table.add(tomlkit.nl())
    return table


NO_KEYRING = (
    "no OS keyring is available here (it needs the `keyring` extra: "
    "pip install 'sandbox-workbench[keyring]', and a keyring service)"
)
"""Why a token cannot be kept in (or read from) the OS keyring here."""


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
        raise ConfigError(f"{NO_KEYRING}; use an environment variable instead")
    import keyring

    try:
        value = keyring.get_password(KEYRING_SERVICE, profile)
    except Exception as error:  # keyring backends raise their own error types
        raise _keyring_failed(f"read the token of profile {profile!r}", error) from error
    return None if value is None else str(value)


def keyring_set(profile: str, token: str) -> None:
    if not keyring_available():
        raise ConfigError(f"{NO_KEYRING}; use --token-env instead")
    if not (token and is_visible_ascii(token)):
        raise ConfigError(f"the token of profile {profile!r} is not stored: {_BAD_TOKEN}")
    import keyring

    try:
        keyring.set_password(KEYRING_SERVICE, profile, token)
    except Exception as error:  # keyring backends raise their own error types
        raise _keyring_failed(f"store the token of profile {profile!r}", error) from error


def keyring_delete(profile: str) -> bool:
    """Delete the profile's token from the OS keyring; False if there was none."""
    if not keyring_available():
        raise ConfigError(NO_KEYRING)
    import keyring
    import keyring.errors

    try:
        keyring.delete_password(KEYRING_SERVICE, profile)
    except keyring.errors.PasswordDeleteError:
        return False
    except Exception as error:  # keyring backends raise their own error types
        raise _keyring_failed(f"delete the token of profile {profile!r}", error) from error
    return True
