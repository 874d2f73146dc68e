"""Fixtures shared by the integration suites (tests/integration/reconcilers and .../runtime).

``namespace`` asks for ``client``, which each suite's own conftest.py defines (the reconciler
suite's installs the banlieue CRDs first): pytest resolves ``client`` from the requesting test's
directory, so one fixture serves both suites with their own client.

``apiserver``: the in-process API-server double (as ``banlieue.testing.apiserver.fixture``'s,
the default), or with ``BANLIEUE_TEST_APISERVER=real`` envtest's kube-apiserver, shared by the
session, banlieue's API installed once, behind ``kubectl proxy`` (``banlieue.testing.realtier``);
tests keep to their own namespace, and every custom resource is deleted before and after each
test (``RealServer.clear_custom_resources``); ``server.request_log`` reads the test's requests
from kube-apiserver's audit log. What only the double has skips the test, naming it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from banlieue.runtime.client import Client
from banlieue.runtime.kinds import NAMESPACE
from banlieue.testing import apiservers
from banlieue.testing.apiserver.fixture import ApiServerHandle, running_double
from banlieue.testing.realtier import RealApiServerHandle, RealServer, real_integration_server


@pytest.fixture(scope="session")
def real_integration(envtest: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealServer, str, Path]]:
    """The session's kube-apiserver with banlieue installed and ``kubectl proxy`` in front of it
    (``banlieue.testing.realtier.real_integration_server``)."""
    with real_integration_server(envtest, tmp_path_factory.mktemp("real-integration")) as real:
        yield real


@pytest_asyncio.fixture
async def apiserver(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[ApiServerHandle | RealApiServerHandle]:
    """The API server of this test (module docstring): the double on a free 127.0.0.1 port,
    stopped after the test; or the session's real one."""
    if apiservers.selected() == "real":
        server, url, kubeconfig = request.getfixturevalue("real_integration")
        envtest = request.getfixturevalue("envtest")
        server.clear_custom_resources(envtest)
        server.mark_requests()  # request_log: this test's requests only
        try:
            yield RealApiServerHandle(server, url, kubeconfig, envtest)
        finally:
            server.clear_custom_resources(envtest)
        return
    async with running_double(tmp_path) as handle:
        yield handle


@pytest.fixture
async def namespace(client: Client) -> str:
    """A new namespace ``ns-<8 hex>`` created over HTTP with the suite's ``client``; its name."""
    name = f"ns-{uuid.uuid4().hex[:8]}"
    await client.create(NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name
