"""Fixtures for runtime integration tests: Clients against the API-server double over HTTP,
a test CRD, and fault injection (``/debug/faults``). The fresh per-test ``namespace`` comes from
tests/integration/conftest.py and is created with this directory's ``client``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from runtime_helpers import WIDGET, WIDGET_CRD, Faults, eventually, new_client

from banlieue.runtime.client import Client
from banlieue.runtime.errors import AlreadyExists
from banlieue.runtime.kinds import CRD, ResourceKind


@pytest.fixture
async def client(apiserver: Any) -> AsyncIterator[Client]:
    c = new_client(apiserver)
    yield c
    await c.close()


@pytest.fixture
async def other_client(apiserver: Any) -> AsyncIterator[Client]:
    """A second, independent client (another process's view of the server)."""
    c = new_client(apiserver)
    yield c
    await c.close()


@pytest.fixture
async def widgets(client: Client) -> ResourceKind:
    """The Widget CRD is installed and served."""
    try:
        await client.create(CRD, WIDGET_CRD)
    except AlreadyExists:
        pass
    await eventually(lambda: _served(client), timeout=10)
    return WIDGET


async def _served(client: Client) -> bool:
    try:
        await client.list(WIDGET, limit=1)
        return True
    except Exception:
        return False


@pytest.fixture
async def faults(other_client: Client) -> AsyncIterator[Faults]:
    f = Faults(other_client)
    yield f
    await f.clear()


