"""Render the Cloudflare Worker templates: the workbench gateway and its runtime Workers.

The templates live in ``worker_templates/`` at the repository root (outside the Python
packages): ``gateway/`` is the gateway Worker (gateway protocol v1, hosting the ``Sandbox``
Durable Object of ``@sandbox-workers/core``) and ``runtime/<language>/`` the private runtime
Worker of each language (sandbox-workers spec 11.2).

``render(destination, ["PYTHON", "RUBY"])`` writes::

    destination/gateway/...            services + RUNTIME_BINDINGS = the chosen bindings
    destination/runtime/python/...
    destination/runtime/ruby/...

Like ``sandbox-workers init`` (spec 11.3) it never overwrites an existing file, not even a
dangling symlink: it checks every target first and raises ``FileExistsError``
("Refusing to overwrite <path>") before writing anything. It does not install or deploy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

__all__ = [
    "LANGUAGES",
    "TEMPLATES_ENV",
    "binding_for",
    "normalize_bindings",
    "render",
    "templates_root",
]

#: The runtime languages with a template, in the order sandbox-workers lists them.
LANGUAGES: Final = ("javascript", "python", "perl", "ruby")

#: Overrides where the templates are looked up (a directory holding ``gateway/``).
TEMPLATES_ENV: Final = "SANDBOX_WORKBENCH_WORKER_TEMPLATES"

DEFAULT_TOKEN_SECRET: Final = "WORKBENCH_TOKEN"

#: Never copied out of a template directory (installs, wrangler state, build outputs).
_SKIPPED: Final = frozenset({"node_modules", ".wrangler", "dist", ".dev.vars", ".DS_Store"})

_SECRET_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SERVICES_BEGIN: Final = "// workbench:services:begin"
_SERVICES_END: Final = "// workbench:services:end"
_SERVICES_RE: Final = re.compile(
    rf"(?P<begin>^(?P<indent>[ \t]*){re.escape(_SERVICES_BEGIN)}[ \t]*\n)"
    rf".*?(?P<end>^[ \t]*{re.escape(_SERVICES_END)}[ \t]*$)",
    re.MULTILINE | re.DOTALL,
)
_RUNTIME_BINDINGS_RE: Final = re.compile(r'"RUNTIME_BINDINGS"\s*:\s*"[^"]*"')
_TOKEN_RE: Final = re.compile(rf"\b{DEFAULT_TOKEN_SECRET}\b")
#: Gateway files in which the token secret's name is substituted.
_TOKEN_FILES: Final = frozenset({"src/index.ts", "wrangler.jsonc", "README.md"})


def templates_root() -> Path:
    """The directory holding ``gateway/`` and ``runtime/<language>/``.

    ``$SANDBOX_WORKBENCH_WORKER_TEMPLATES`` if set; else ``workbench/worker_templates``
    (where a wheel would carry them as package data); else ``worker_templates/`` at the
    repository root, which is where they live in a checkout and an editable install.
    """
    override = os.environ.get(TEMPLATES_ENV)
    candidates = [Path(override).expanduser()] if override else []
    package_dir = Path(__file__).resolve().parent
    candidates += [package_dir / "worker_templates", package_dir.parent / "worker_templates"]
    for candidate in candidates:
        if (candidate / "gateway" / "wrangler.jsonc").is_file():
            return candidate
    searched = ", ".join(str(candidate) for candidate in candidates)
    raise FileNotFoundError(f"Worker templates not found (looked in {searched})")


def binding_for(language: str) -> str:
    """The Service Binding name of a runtime language (``python`` → ``PYTHON``)."""
    return language.upper()


def normalize_bindings(bindings: Sequence[str]) -> list[str]:
    """Upper-case binding names, order kept; each names a runtime language, no duplicates."""
    if isinstance(bindings, str):
        raise TypeError("bindings must be a sequence of names, not a string")
    chosen: list[str] = []
    for raw in bindings:
        name = raw.strip().upper()
        if name.lower() not in LANGUAGES:
            known = ", ".join(binding_for(language) for language in LANGUAGES)
            raise ValueError(f"Unknown runtime binding '{raw}' (known: {known})")
        if name in chosen:
            raise ValueError(f"Duplicate runtime binding '{name}'")
        chosen.append(name)
    if not chosen:
        raise ValueError("Choose at least one runtime binding")
    return chosen


def render(
    destination: Path,
    bindings: Sequence[str],
    *,
    token_secret_name: str = DEFAULT_TOKEN_SECRET,
) -> list[Path]:
    """Copy the gateway template and the chosen runtimes' templates into ``destination``.

    ``bindings`` are Service Binding names (``"PYTHON"``; case-insensitive), one per runtime
    language. The gateway's ``wrangler.jsonc`` gets exactly those ``services`` (binding
    ``B`` → Worker ``sandbox-<b>``) and ``RUNTIME_BINDINGS``; ``token_secret_name`` renames
    the bearer-token secret. Returns the written files, in order. Raises ``ValueError`` for
    bad bindings or secret name and ``FileExistsError`` (nothing written) if any target
    already exists.
    """
    chosen = normalize_bindings(bindings)
    if _SECRET_NAME_RE.fullmatch(token_secret_name) is None:
        raise ValueError(f"Invalid secret name '{token_secret_name}'")
    root = templates_root()
    destination = Path(destination)

    plan: list[tuple[Path, Path, str | None]] = []  # (source, target, substituted text)
    gateway = root / "gateway"
    for source in _template_files(gateway):
        relative = source.relative_to(gateway).as_posix()
        text: str | None = None
        if relative == "wrangler.jsonc":
            text = _render_wrangler(source.read_text(encoding="utf-8"), chosen)
        if relative in _TOKEN_FILES and token_secret_name != DEFAULT_TOKEN_SECRET:
            text = _TOKEN_RE.sub(
                token_secret_name, text if text is not None else source.read_text(encoding="utf-8")
            )
        plan.append((source, destination / "gateway" / relative, text))
    for binding in chosen:
        language = binding.lower()
        runtime = root / "runtime" / language
        for source in _template_files(runtime):
            target = destination / "runtime" / language / source.relative_to(runtime)
            plan.append((source, target, None))

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


def _render_wrangler(text: str, bindings: Sequence[str]) -> str:
    """Substitute the ``services`` block and ``RUNTIME_BINDINGS`` of the gateway config."""
    match = _SERVICES_RE.search(text)
    if match is None:
        raise RuntimeError("Gateway wrangler.jsonc lacks the workbench:services markers")
    indent = match.group("indent")
    entries = [
        f"{indent}  {{ {_pair('binding', b)}, {_pair('service', 'sandbox-' + b.lower())} }}"
        for b in bindings
    ]
    services = f'{indent}"services": [\n' + ",\n".join(entries) + f"\n{indent}],\n"
    text = text[: match.end("begin")] + services + text[match.start("end") :]
    text, count = _RUNTIME_BINDINGS_RE.subn(
        lambda _: _pair("RUNTIME_BINDINGS", ",".join(bindings)), text
    )
    if count != 1:
        raise RuntimeError("Gateway wrangler.jsonc must set RUNTIME_BINDINGS exactly once")
    return text


def _pair(key: str, value: str) -> str:
    return f"{json.dumps(key)}: {json.dumps(value)}"
