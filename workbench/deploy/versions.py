"""The one tested set of sandbox-workers versions the rendered Workers pin.

It lives in ``worker_templates/versions.json``: an exact version for `@sandbox-workers/core`
and for each runtime package, plus the interpreter protocol (spec 2.2.2) that core accepts.
The renderer writes it into every Worker it renders: the `peerDependencies` of each
``package.json`` (and the gateway's lockfile), the runtime READMEs, and the gateway README's
versions block. Each Worker's build then refuses any other installed version
(``check-versions.mjs``), and the gateway reports the pinned core in ``GET /v1/health``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from engines.registry import LANGUAGES

__all__ = [
    "CORE_PACKAGE",
    "VERSIONS_FILE",
    "PinnedVersions",
    "load_versions",
    "pin_manifest",
    "runtime_package",
    "with_versions_block",
]

VERSIONS_FILE: Final = "versions.json"
CORE_PACKAGE: Final = "@sandbox-workers/core"
SCOPE: Final = "@sandbox-workers/"
EXACT_VERSION: Final = re.compile(r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?")
"""One exact version: no range, no tag (the same rule as ``check-versions.mjs``)."""
_BLOCK: Final = re.compile(
    r"(?P<begin><!-- workbench:versions:begin -->\n).*?(?P<end><!-- workbench:versions:end -->)",
    re.DOTALL,
)


def runtime_package(language: str) -> str:
    """The npm package of a language's runtime Worker (``python`` → ``@sandbox-workers/python``)."""
    return f"{SCOPE}{language}"


@dataclass(frozen=True)
class PinnedVersions:
    packages: dict[str, str]
    """Package name → exact version: the core and one runtime package per language."""
    interpreter_protocol: int
    """The runtime protocol the pinned core accepts (and the pinned runtimes speak)."""
    source: dict[str, str]
    """Where the set comes from (repository, pin file, commit, note)."""

    @property
    def core(self) -> str:
        return self.packages[CORE_PACKAGE]

    def runtime(self, language: str) -> str:
        return self.packages[runtime_package(language)]

    def block(self) -> str:
        """The gateway README's versions block: the set, its protocol and its source."""
        rows = "".join(f"| `{name}` | {version} |\n" for name, version in self.packages.items())
        commit = self.source.get("commit", "")
        return (
            "| Package | Version |\n| --- | --- |\n"
            f"{rows}\n"
            f"The pinned core accepts runtimes of interpreter protocol "
            f"**{self.interpreter_protocol}**. Source: `{self.source.get('repository', '')}`, "
            f"`{self.source.get('pin', '')}` → commit `{commit}`. "
            f"{self.source.get('note', '')}\n\n"
            "```sh\n"
            f"npm install --no-save {CORE_PACKAGE}@{self.core}   # in this directory\n"
            "```\n"
        )


def load_versions(root: Path) -> PinnedVersions:
    """Read ``versions.json`` of the templates at `root`; `ValueError` (naming the file) if a
    version is not exact or a package is missing."""
    path = root / VERSIONS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"Cannot read {path}: {error}") from error
    packages = data.get("packages") if isinstance(data, dict) else None
    protocol = data.get("interpreterProtocol") if isinstance(data, dict) else None
    if not isinstance(packages, dict) or not isinstance(protocol, int):
        raise ValueError(f"{path}: needs 'packages' (name → version) and 'interpreterProtocol'")
    for name in [CORE_PACKAGE, *(runtime_package(language) for language in LANGUAGES)]:
        if name not in packages:
            raise ValueError(f"{path}: no version for {name}")
    for name, version in packages.items():
        if not isinstance(version, str) or EXACT_VERSION.fullmatch(version) is None:
            raise ValueError(f"{path}: {name} must be one exact version, not {version!r}")
    source = data.get("source")
    return PinnedVersions(
        dict(packages),
        protocol,
        {str(key): str(value) for key, value in source.items()} if isinstance(source, dict) else {},
    )


def pin_manifest(text: str, versions: PinnedVersions) -> str:
    """A ``package.json`` or ``package-lock.json`` with each `@sandbox-workers/*` peer
    dependency set to its pinned version (npm's own formatting kept)."""
    data = json.loads(text)
    lockfile_root = data.get("packages", {}).get("") if "lockfileVersion" in data else None
    manifest: Mapping[str, Any] = lockfile_root if isinstance(lockfile_root, dict) else data
    peers = manifest.get("peerDependencies", {})
    for name in peers:
        if name.startswith(SCOPE):
            if name not in versions.packages:
                raise ValueError(f"{VERSIONS_FILE} has no version for {name}")
            peers[name] = versions.packages[name]
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def with_versions_block(text: str, versions: PinnedVersions) -> str:
    """`text` (a README) with its ``workbench:versions`` block rewritten from `versions`."""
    match = _BLOCK.search(text)
    if match is None:
        raise RuntimeError("The gateway README lacks the workbench:versions markers")
    return text[: match.end("begin")] + versions.block() + text[match.start("end") :]
