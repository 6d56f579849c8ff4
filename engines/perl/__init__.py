"""Perl 5.42 on zeroperl (`engine.py`: the engine and its host adapter)."""

from engines.perl.engine import ENGINE

__all__ = ["ENGINE"]
