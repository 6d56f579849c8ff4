"""The toolchain the Python engine is built with.

Not among its `build_inputs`: the versions reach `inputs_digest` through the engine
string, and the sha256 only verifies the installed toolchain.
"""

from __future__ import annotations

from typing import Final

COMPONENTIZE_PY_VERSION: Final = "0.25.1"
"""Pinned exactly in pyproject.toml; it determines the CPython build below."""
PYTHON_VERSION: Final = "3.14.0"
"""CPython inside componentize-py 0.25.1; `prepare` checks the built guest's `sys.version`."""
COMPONENTIZE_PY_SO_SHA256: Final = {
    # componentize_py-0.25.1-cp39-abi3-manylinux_2_28_x86_64.whl
    ("Linux", "x86_64"): "260941cadb237f0ae5a19dcbc01220ca48d32dbd58d8e451c6a2f95497e3e291",
}
"""sha256 of `componentize_py/componentize_py.abi3.so` per platform we have verified."""
