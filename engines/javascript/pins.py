"""The toolchain the JavaScript engine is built with.

Not among its `build_inputs`: package.json and package-lock.json pin the npm packages
(and are), the version reaches `inputs_digest` through the engine string, and the sha256
only verifies what `npm ci` installed.
"""

from __future__ import annotations

from typing import Final

COMPONENTIZE_JS_VERSION: Final = "0.23.0"
"""Pinned exactly in package.json / package-lock.json."""
STARLINGMONKEY_SHA256: Final = "6094cd93d966f9bec9b01332db6e0eedbaf22f60b745c9f823f21e33cbd4d365"
"""sha256 of componentize-js 0.23.0's `lib/starlingmonkey_embedding.wasm`."""
STARLINGMONKEY_PATH: Final = (
    "node_modules/@bytecodealliance/componentize-js/lib/starlingmonkey_embedding.wasm"
)
