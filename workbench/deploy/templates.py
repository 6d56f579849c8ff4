"""Render the Cloudflare Worker templates: the workbench gateway and its runtime Workers.

The templates live in ``worker_templates/`` at the repository root (outside the Python
packages): ``gateway/`` is the gateway Worker (gateway protocol v1, hosting the ``Sandbox``
Durable Object of ``@sandbox-workers/core``), ``runtime/`` the one template of a private
runtime Worker (sandbox-workers spec 11.2), filled in per binding, and ``versions.json`` the
tested set of sandbox-workers versions every rendered Worker pins (`workbench.deploy.versions`).

``render(destination, ["PYTHON", "SCRATCH=ruby"])`` writes::

    destination/gateway/...            services + RUNTIME_BINDINGS = the chosen bindings
    destination/runtime/python/...     binding PYTHON, Worker sandbox-python
    destination/runtime/scratch/...    binding SCRATCH, a Ruby Worker sandbox-scratch

Each Worker gets ``check-versions.mjs``, which its wrangler build runs first. Like
``sandbox-workers init`` (spec 11.3) it never overwrites an existing file, not even a
dangling symlink: it checks every target first and raises ``FileExistsError``
("Refusing to overwrite <path>") before writing anything. It does not install or deploy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from engines.registry import LANGUAGES
from workbench.deploy.versions import (
    PinnedVersions,
    load_versions,
    pin_manifest,
    runtime_package,
    with_versions_block,
)

__all__ = [
    "LANGUAGES",
    "TEMPLATES_ENV",
    "RuntimeWorker",
    "parse_bindings",
    "plan_runtimes",
    "render",
    "templates_root",
]

#: Overrides where the templates are looked up (a directory holding ``gateway/``).
TEMPLATES_ENV: Final = "SANDBOX_WORKBENCH_WORKER_TEMPLATES"

DEFAULT_TOKEN_SECRET: Final = "WORKBENCH_TOKEN"
DEFAULT_GATEWAY_NAME: Final = "sandbox-workbench-gateway"
DEFAULT_NAME_PREFIX: Final = "sandbox"
CHECK_SCRIPT: Final = "check-versions.mjs"
DISPLAY_NAMES: Final = {
    "javascript": "JavaScript",
    "python": "Python",
    "perl": "Perl",
    "ruby": "Ruby",
}
#: The gateway's own env names (bindings, vars, the token secret): no runtime binding may
#: take one of them.
GATEWAY_ENV_NAMES: Final = frozenset(
    {"Sandbox", "REGISTRY", "RUNTIME_BINDINGS", "SANDBOX_IDLE_TTL_MS", "SANDBOX_FILE_API"}
)

#: Never copied out of a template directory (installs, wrangler state, build outputs).
_SKIPPED: Final = frozenset({"node_modules", ".wrangler", "dist", ".dev.vars", ".DS_Store"})

_SECRET_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BINDING_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A Service Binding name the Sandbox accepts (spec 7.2)."""
_WORKER_NAME_RE: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
"""A Cloudflare Worker name: lower-case letters, digits and inner dashes, at most 63."""
_SERVICES_BEGIN: Final = "// workbench:services:begin"
_SERVICES_END: Final = "// workbench:services:end"
_SERVICES_RE: Final = re.compile(
    rf"(?P<begin>^(?P<indent>[ \t]*){re.escape(_SERVICES_BEGIN)}[ \t]*\n)"
    rf".*?(?P<end>^[ \t]*{re.escape(_SERVICES_END)}[ \t]*$)",
    re.MULTILINE | re.DOTALL,
)
_RUNTIME_BINDINGS_RE: Final = re.compile(r'"RUNTIME_BINDINGS"\s*:\s*"[^"]*"')
_GATEWAY_NAME_RE: Final = re.compile(rf'"name"\s*:\s*"{DEFAULT_GATEWAY_NAME}"')
_TOKEN_RE: Final = re.compile(rf"\b{DEFAULT_TOKEN_SECRET}\b")
#: Gateway files in which the token secret's name is substituted.
_TOKEN_FILES: Final = frozenset({"src/index.ts", "wrangler.jsonc", "README.md"})
_FLAG_BLOCK_RE: Final = re.compile(
    r"\{\{(?P<sign>[#^])(?P<flag>\w+)\}\}\n(?P<body>.*?)\{\{/(?P=flag)\}\}\n", re.DOTALL
)
_PLACEHOLDER_RE: Final = re.compile(r"\{\{(\w+)\}\}")


@dataclass(frozen=True)
class RuntimeWorker:
    """One runtime Worker to render: the gateway reaches it as `binding`."""

    binding: str
    language: str
    name: str
    """The Worker's name, which the gateway's Service Binding targets (`service`)."""
    contexts: bool
    """False for Ruby and for a stateless rendering: no Interpreter, no code contexts."""

    @property
    def directory(self) -> str:
        return f"runtime/{self.binding.lower()}"


def templates_root() -> Path:
    """The directory holding ``gateway/``, ``runtime/`` and ``versions.json``.

    ``$SANDBOX_WORKBENCH_WORKER_TEMPLATES`` if set; else ``workbench/worker_templates``
    (where a wheel would carry them as package data); else ``worker_templates/`` at the
    repository root, which is where they live in a checkout and an editable install.
    """
    override = os.environ.get(TEMPLATES_ENV)
    candidates = [Path(override).expanduser()] if override else []
    package_dir = Path(__file__).resolve().parent.parent  # the `workbench` package
    candidates += [package_dir / "worker_templates", package_dir.parent / "worker_templates"]
    for candidate in candidates:
        if (candidate / "gateway" / "wrangler.jsonc").is_file():
            return candidate
    searched = ", ".join(str(candidate) for candidate in candidates)
    raise FileNotFoundError(f"Worker templates not found (looked in {searched})")


def parse_bindings(entries: Sequence[str]) -> dict[str, str]:
    """Binding name → language, order kept. An entry is a language or its upper-case
    binding (``python``, ``PYTHON``), or ``NAME=language`` for a binding of your choice;
    names are upper-cased. `ValueError` for an unknown language, a bad, taken or repeated
    name, or no binding at all."""
    if isinstance(entries, str):
        raise TypeError("bindings must be a sequence of names, not a string")
    chosen: dict[str, str] = {}
    for raw in entries:
        name, separator, language = (part.strip() for part in raw.partition("="))
        name = name.upper()
        if not separator:
            language = name.lower()
            if language not in LANGUAGES:
                known = ", ".join(known_language.upper() for known_language in LANGUAGES)
                raise ValueError(
                    f"Unknown runtime binding '{raw.strip()}' (known: {known}; "
                    "or NAME=language for a binding name of your choice)"
                )
        elif language.lower() not in LANGUAGES:
            raise ValueError(
                f"Unknown language '{language}' for binding '{name}' "
                f"(known: {', '.join(LANGUAGES)})"
            )
        if _BINDING_RE.fullmatch(name) is None:
            raise ValueError(
                f"Invalid binding name '{name}': letters, digits and _ only, "
                "not starting with a digit"
            )
        if name in GATEWAY_ENV_NAMES or name == DEFAULT_TOKEN_SECRET:
            raise ValueError(f"Binding name '{name}' is taken by the gateway itself")
        if name in chosen:
            raise ValueError(f"Duplicate runtime binding '{name}'")
        chosen[name] = language.lower()
    if not chosen:
        raise ValueError("Choose at least one runtime binding")
    return chosen


def plan_runtimes(
    bindings: Sequence[str],
    *,
    name_prefix: str | None = None,
    services: Mapping[str, str] | None = None,
    stateless: bool = False,
) -> list[RuntimeWorker]:
    """The runtime Workers of `bindings` (see `parse_bindings`). A Worker is named
    ``<prefix>-<binding>`` (prefix ``sandbox``; ``_`` becomes ``-``) unless `services` names
    it (binding → Worker name); `stateless` drops code contexts from every runtime."""
    chosen = parse_bindings(bindings)
    prefix = DEFAULT_NAME_PREFIX if name_prefix is None else name_prefix
    named = {binding.strip().upper(): name for binding, name in (services or {}).items()}
    for binding in named:
        if binding not in chosen:
            raise ValueError(f"--service {binding}: no such binding (chosen: {', '.join(chosen)})")
    workers = []
    for binding, language in chosen.items():
        name = named.get(binding) or f"{prefix}-{binding.lower().replace('_', '-')}"
        workers.append(
            RuntimeWorker(
                binding, language, _worker_name(name), language != "ruby" and not stateless
            )
        )
    seen: dict[str, str] = {}
    for worker in workers:
        if worker.name in seen:
            raise ValueError(
                f"Bindings {seen[worker.name]} and {worker.binding} would both target the "
                f"Worker '{worker.name}'"
            )
        seen[worker.name] = worker.binding
    return workers


def gateway_name(name_prefix: str | None) -> str:
    """The gateway Worker's name: ``<prefix>-gateway``, or the template's own."""
    return DEFAULT_GATEWAY_NAME if name_prefix is None else _worker_name(f"{name_prefix}-gateway")


def _worker_name(name: str) -> str:
    if _WORKER_NAME_RE.fullmatch(name) is None:
        raise ValueError(
            f"Invalid Worker name '{name}': lower-case letters, digits and inner dashes, "
            "at most 63 characters"
        )
    return name


def render(
    destination: Path,
    bindings: Sequence[str],
    *,
    token_secret_name: str = DEFAULT_TOKEN_SECRET,
    name_prefix: str | None = None,
    services: Mapping[str, str] | None = None,
    stateless: bool = False,
) -> list[Path]:
    """Write the gateway and the chosen runtime Workers into ``destination``.

    `bindings`, `name_prefix`, `services` and `stateless` choose the runtime Workers (see
    `plan_runtimes`); the gateway's ``wrangler.jsonc`` gets exactly their ``services`` and
    ``RUNTIME_BINDINGS``, and every Worker the versions of ``versions.json``.
    ``token_secret_name`` renames the bearer-token secret. Returns the written files, in
    order. Raises ``ValueError`` for bad choices and ``FileExistsError`` (nothing written)
    if any target already exists.
    """
    workers = plan_runtimes(
        bindings, name_prefix=name_prefix, services=services, stateless=stateless
    )
    if _SECRET_NAME_RE.fullmatch(token_secret_name) is None:
        raise ValueError(f"Invalid secret name '{token_secret_name}'")
    if token_secret_name in {worker.binding for worker in workers}:
        raise ValueError(f"Binding name '{token_secret_name}' is taken by the gateway itself")
    gateway_worker = gateway_name(name_prefix)
    if gateway_worker in {worker.name for worker in workers}:
        raise ValueError(f"A runtime Worker cannot be named like the gateway ('{gateway_worker}')")
    root = templates_root()
    versions = load_versions(root)
    destination = Path(destination)
    check_script = root / CHECK_SCRIPT

    plan: list[tuple[Path, Path, str | None]] = []  # (source, target, substituted text)
    gateway = root / "gateway"
    for source in _template_files(gateway):
        relative = source.relative_to(gateway).as_posix()
        text = _render_gateway_file(
            relative, source, workers, versions, token_secret_name, gateway_worker
        )
        plan.append((source, destination / "gateway" / relative, text))
    plan.append((check_script, destination / "gateway" / CHECK_SCRIPT, None))
    runtime = root / "runtime"
    for worker in workers:
        for source in _template_files(runtime):
            text = _fill(source.read_text(encoding="utf-8"), worker, versions)
            plan.append(
                (source, destination / worker.directory / source.relative_to(runtime), text)
            )
        plan.append((check_script, destination / worker.directory / CHECK_SCRIPT, None))

    for _, target, _ in plan:
        if os.path.lexists(target):
            raise FileExistsError(f"Refusing to overwrite {target}")

    written: list[Path] = []
    for source, target, text in plan:
        target.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            shutil.copyfile(source, target)
        else:
            target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


def _render_gateway_file(
    relative: str,
    source: Path,
    workers: Sequence[RuntimeWorker],
    versions: PinnedVersions,
    token_secret_name: str,
    worker_name: str,
) -> str | None:
    """The rendered text of one gateway template file, or None to copy it unchanged."""
    if relative not in {"wrangler.jsonc", "package.json", "package-lock.json", "README.md"} and (
        relative not in _TOKEN_FILES or token_secret_name == DEFAULT_TOKEN_SECRET
    ):
        return None
    text = source.read_text(encoding="utf-8")
    if relative == "wrangler.jsonc":
        text = _render_wrangler(text, workers)
        text, count = _GATEWAY_NAME_RE.subn(f'"name": "{worker_name}"', text, count=1)
        if count != 1:
            raise RuntimeError(f'Gateway wrangler.jsonc must name "{DEFAULT_GATEWAY_NAME}"')
    elif relative in {"package.json", "package-lock.json"}:
        text = pin_manifest(text, versions)
    elif relative == "README.md":
        text = with_versions_block(text, versions).replace(DEFAULT_GATEWAY_NAME, worker_name)
    if relative in _TOKEN_FILES and token_secret_name != DEFAULT_TOKEN_SECRET:
        text = _TOKEN_RE.sub(token_secret_name, text)
    return text


def _fill(text: str, worker: RuntimeWorker, versions: PinnedVersions) -> str:
    """A runtime template file for `worker`: ``{{#flag}}``/``{{^flag}}`` line blocks kept
    when the flag is on/off, then ``{{placeholder}}`` values."""
    flags = {
        "contexts": worker.contexts,
        "ruby": worker.language == "ruby",
        "stateless": not worker.contexts and worker.language != "ruby",
    }
    values = {
        "worker": worker.name,
        "binding": worker.binding,
        "language": worker.language,
        "Language": DISPLAY_NAMES[worker.language],
        "package": runtime_package(worker.language),
        "version": versions.runtime(worker.language),
    }
    text = _FLAG_BLOCK_RE.sub(
        lambda match: (
            match.group("body")
            if flags[match.group("flag")] == (match.group("sign") == "#")
            else ""
        ),
        text,
    )
    return _PLACEHOLDER_RE.sub(lambda match: values[match.group(1)], text)


def _template_files(directory: Path) -> Iterator[Path]:
    """Every regular file under ``directory``, sorted, skipping installs and build output."""
    if not directory.is_dir():
        raise FileNotFoundError(f"Worker template not found: {directory}")
    for current, dirnames, filenames in os.walk(directory):
        dirnames[:] = sorted(name for name in dirnames if name not in _SKIPPED)
        for name in sorted(filenames):
            path = Path(current) / name
            if name not in _SKIPPED and path.is_file():
                yield path


def _render_wrangler(text: str, workers: Sequence[RuntimeWorker]) -> str:
    """Substitute the ``services`` block and ``RUNTIME_BINDINGS`` of the gateway config."""
    match = _SERVICES_RE.search(text)
    if match is None:
        raise RuntimeError("Gateway wrangler.jsonc lacks the workbench:services markers")
    indent = match.group("indent")
    entries = [
        f"{indent}  {{ {_pair('binding', worker.binding)}, {_pair('service', worker.name)} }}"
        for worker in workers
    ]
    services = f'{indent}"services": [\n' + ",\n".join(entries) + f"\n{indent}],\n"
    text = text[: match.end("begin")] + services + text[match.start("end") :]
    bindings = ",".join(worker.binding for worker in workers)
    text, count = _RUNTIME_BINDINGS_RE.subn(lambda _: _pair("RUNTIME_BINDINGS", bindings), text)
    if count != 1:
        raise RuntimeError("Gateway wrangler.jsonc must set RUNTIME_BINDINGS exactly once")
    return text


def _pair(key: str, value: str) -> str:
    return f"{json.dumps(key)}: {json.dumps(value)}"
