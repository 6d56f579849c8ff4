"""CPython 3.14 as a componentize-py component, run decomposed (`engine.py`: the engine
and its build; `guest/`: what the component is built from)."""

from engines.python.engine import ENGINE

__all__ = ["ENGINE"]
