"""SpiderMonkey (StarlingMonkey) as a componentize-js component, run decomposed
(`engine.py`: the engine and its build; `guest/`, `wit/` and the npm project: what it is
built from)."""

from engines.javascript.engine import ENGINE

__all__ = ["ENGINE"]
