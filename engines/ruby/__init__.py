"""CRuby 4.0 on ruby.wasm (`engine.py`: the engine and its host adapter)."""

from engines.ruby.engine import ENGINE

__all__ = ["ENGINE"]
