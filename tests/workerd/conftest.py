"""Fixtures of the workerd gateway tests: the session's one gateway Worker in workerd."""

from __future__ import annotations

import pytest

from tests.workerd.harness import WorkerdGateway, session_gateway


@pytest.fixture
def gateway(request: pytest.FixtureRequest) -> WorkerdGateway:
    return session_gateway(request)
