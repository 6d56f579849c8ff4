"""What the Perl engine is prepared from (part of its `build_inputs`: a change here
prepares the engine again)."""

from __future__ import annotations

from typing import Final

from engines.fetch import NpmArtifact

ZEROPERL: Final = NpmArtifact(
    package="@6over3/zeroperl-ts",
    version="1.0.10",
    member="package/dist/esm/zeroperl.wasm",
    sha256="a6ae97f184fabc444b0b70d77c3d16475bfb3de16ebfb58ab8b2fbf98a53835e",
)
"""`dist/esm/zeroperl.wasm` of @6over3/zeroperl-ts 1.0.10 (25,358,252 bytes)."""
PERL_VERSION: Final = "5.42.0"
