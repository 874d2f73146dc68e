"""Fixtures shared by the integration suites (tests/integration/reconcilers and .../runtime).

``namespace`` asks for ``client``, which each suite's own conftest.py defines (the reconciler
suite's installs the banlieue CRDs first): pytest resolves ``client`` from the requesting test's
directory, so one fixture serves both suites with their own client."""

from __future__ import annotations

import uuid

import pytest

from banlieue.runtime.client import Client
from banlieue.runtime.kinds import NAMESPACE


@pytest.fixture
async def namespace(client: Client) -> str:
    """A new namespace ``ns-<8 hex>`` created over HTTP with the suite's ``client``; its name."""
    name = f"ns-{uuid.uuid4().hex[:8]}"
    await client.create(NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name
