"""Ruby engine: CRuby 4.0 from npm `@ruby/4.0-wasm-wasi` (ruby.wasm), a core reactor module."""

from engines.ruby.engine import (
    ENGINE,
    PREPARED_NAME,
    WASM_SHA256,
    RubyEngine,
    RubyGuest,
    rewrite_verified,
)

__all__ = ["ENGINE", "PREPARED_NAME", "WASM_SHA256", "RubyEngine", "RubyGuest", "rewrite_verified"]
