"""Fixtures of the workerd gateway tests: the session's one gateway Worker in workerd."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.workerd.harness import WorkerdGateway, session_gateway


@pytest.fixture
def gateway(request: pytest.FixtureRequest) -> WorkerdGateway:
    return session_gateway(request)


@pytest.fixture
def client(gateway: WorkerdGateway) -> Iterator[httpx.Client]:
    """An HTTP client of the gateway, with its token."""
    with gateway.client() as opened:
        yield opened


@pytest.fixture
def anonymous(gateway: WorkerdGateway) -> Iterator[httpx.Client]:
    """An HTTP client of the gateway, without a token."""
    with gateway.client(authorized=False, timeout=60.0) as opened:
        yield opened
