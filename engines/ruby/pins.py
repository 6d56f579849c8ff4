"""What the Ruby engine is prepared from (part of its `build_inputs`: a change here
prepares the engine again)."""

from __future__ import annotations

from typing import Final

from engines.fetch import NpmArtifact

# The same shape as perl/pins.py on purpose: every prebuilt engine pins one npm artifact.
RUBY_WASM: Final = NpmArtifact(
    package="@ruby/4.0-wasm-wasi",
    version="2.10.1",
    member="package/dist/ruby+stdlib.wasm",
    sha256="9fe3c749730a16da9b0d1a973bb77bec164f8d958efcb7f5b81e4275ea8c5439",
)
"""`dist/ruby+stdlib.wasm` of @ruby/4.0-wasm-wasi 2.10.1 (32,555,374 bytes)."""
RUBY_VERSION: Final = "4.0.0"
