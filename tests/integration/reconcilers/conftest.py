"""Fixtures shared by the reconciler integration tests (one directory per controller package of
banlieue/reconcilers): a Client of the API-server double with the banlieue CRDs installed,
``ns`` (the fresh per-test namespace under a short name), a pyVmomi session to vcsim and a
VSphereBackend for the provider role. Loading this file puts this directory on ``sys.path``
(pytest's ``prepend`` import mode): the tests import reconciler_harness, provider_role and
controller_role from here.

``apiserver`` and ``vcsim`` come from tests/conftest.py; ``namespace`` (created with this
directory's ``client``) from tests/integration/conftest.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from reconciler_harness import CRD_DIR, new_client

from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.runtime.client import Client


@pytest.fixture
async def client(apiserver: Any) -> AsyncIterator[Client]:
    """A client of the double with the banlieue CRDs (config/crd) installed; closed after the test."""
    apiserver.server.load_crd_dir(CRD_DIR)
    c = new_client(apiserver.url)
    yield c
    await c.close()


@pytest.fixture
def ns(namespace: str) -> str:
    """The same namespace as ``namespace``, under the short name the VSphereMachine tests use."""
    return namespace



@pytest.fixture
async def backend() -> AsyncIterator[VSphereBackend]:
    """A VSphereBackend (4 workers; task 60 s, request 10 s, watch round 5 s, inventory index
    TTL 1 s) for ``running_role``; closed after the test."""
    b = VSphereBackend(max_workers=4, task_timeout=60.0, request_timeout=10.0, watch_max_wait=5.0, index_ttl=1.0)
    try:
        yield b
    finally:
        await b.close()
