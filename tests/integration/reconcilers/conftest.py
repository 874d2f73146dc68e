"""Fixtures shared by the reconciler integration tests (one directory per controller package of
banlieue/reconcilers): a Client of the API-server double with the banlieue CRDs installed,
``ns`` (the fresh per-test namespace under a short name), a pyVmomi session to vcsim and a
VSphereBackend for the provider role. Loading this file puts this directory on ``sys.path``
(pytest's ``prepend`` import mode): the tests import reconciler_harness, provider_role and
controller_role from here.

``apiserver`` and ``vcsim`` come from tests/conftest.py; ``namespace`` (created with this
directory's ``client``) from tests/integration/conftest.py.

The module's ``vcsim`` is shared by its tests and VM names are the machines' names (``m1`` in
several tests): ``vcsim_left_clean`` destroys, after each test that uses it, every VM the test
left behind (a test that fails or skips half-way, e.g. on the real API server, would otherwise
make the next test's clone fail with DuplicateName)."""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pyVim.connect import Disconnect, SmartConnect
from pyVmomi import vim, vmodl
from reconciler_harness import CRD_DIR, new_client

from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.runtime.client import Client
from banlieue.testing.vcsim import VcsimProcess

CLEANUP_TIMEOUT = 30.0  # seconds for the power-off and destroy tasks of the leftover VMs


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


def _vm_ids(si: Any) -> dict[str, Any]:
    """Every VM of ``si``'s inventory by managed object id."""
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    try:
        return {vm._moId: vm for vm in view.view}
    finally:
        view.Destroy()


def _wait_tasks(tasks: list[Any]) -> None:
    deadline = time.monotonic() + CLEANUP_TIMEOUT
    while any(t.info.state not in ("success", "error") for t in tasks) and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.fixture(autouse=True)
def vcsim_left_clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """For a test that uses the module's ``vcsim``: after it (whatever its outcome), power off and
    destroy the VMs it created, so the next test of the module starts from the same inventory."""
    if "vcsim" not in request.fixturenames:
        yield
        return
    vc: VcsimProcess = request.getfixturevalue("vcsim")
    ctx = ssl.create_default_context(cafile=vc.ca_file)
    si = SmartConnect(host=vc.host, port=vc.port, user=vc.username, pwd=vc.password, sslContext=ctx)
    try:
        before = set(_vm_ids(si))
    finally:
        Disconnect(si)
    yield
    si = SmartConnect(host=vc.host, port=vc.port, user=vc.username, pwd=vc.password, sslContext=ctx)
    try:
        left = [vm for moid, vm in _vm_ids(si).items() if moid not in before]
        for step in ("power off", "destroy"):
            tasks = []
            for vm in left:
                # A VM the test's own cleanup is still destroying may vanish meanwhile.
                with contextlib.suppress(vmodl.fault.ManagedObjectNotFound):
                    if step == "destroy":
                        tasks.append(vm.Destroy_Task())
                    elif vm.runtime.powerState == "poweredOn":
                        tasks.append(vm.PowerOffVM_Task())
            _wait_tasks(tasks)
    finally:
        Disconnect(si)
