"""Fetching engine inputs through the registries' own clients, with sha256 verification."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
from pathlib import Path

from engines.language import PrepareError


def require_program(name: str, purpose: str) -> str:
    """Return the path of `name` or raise a `PrepareError` that says how to fix it."""
    path = shutil.which(name)
    if path is None:
        raise PrepareError(f"{name} not found: install Node.js and npm to {purpose}")
    return path


def npm_pack(spec: str, dest: Path) -> Path:
    """Download `spec` (NAME@VERSION) with `npm pack` into `dest`; return the tarball path."""
    npm = require_program("npm", f"download {spec}")
    dest.mkdir(parents=True, exist_ok=True)
    completed = subprocess.run(
        [npm, "pack", spec, "--silent", "--pack-destination", str(dest)],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        detail = (completed.stderr or completed.stdout).strip().splitlines()[-1:]
        raise PrepareError(f"npm pack {spec} failed: {' '.join(detail) or 'no output'}")
    name = completed.stdout.strip().splitlines()[-1]
    return dest / name


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
