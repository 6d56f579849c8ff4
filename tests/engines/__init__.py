from __future__ import annotations

from collections.abc import Mapping

from engines.result import ExecutionResult, Limits
from engines.session import Session


def run(
    language: str,
    code: str,
    env_vars: Mapping[str, str] | None = None,
    *,
    limits: Limits | None = None,
) -> ExecutionResult:
    """A stateless execution (spec 9.4) on an in-process `Session`: a fresh instance, no
    /workspace, nothing persists (the workbench's runs go through an engine process,
    `engines.process.run_stateless`)."""
    with Session(language, limits=limits) as session:
        return session.execute(code, env_vars, session=False).result
