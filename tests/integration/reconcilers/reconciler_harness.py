"""Plain helpers shared by the reconciler integration tests (fixtures are in conftest.py; the
role harnesses in provider_role.py and controller_role.py).

The tests live in one directory per controller package of banlieue/reconcilers and import these
as ``from reconciler_harness import ...``: pytest's default ``prepend`` import mode puts this
directory on ``sys.path`` when it loads the conftest.py beside it, before any test below it.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pyVmomi import vim

from banlieue.backends.vsphere.find import UID_KEY
from banlieue.runtime.client import Client
from banlieue.runtime.config import Timeouts, config_for_url

CRD_DIR = Path(__file__).resolve().parents[3] / "config" / "crd"
"""The banlieue CRDs (config/crd), loaded into the API-server double before a test's objects."""


def new_client(url: str) -> Client:
    """A Client of the API-server double at ``url`` (connect 2 s, request 10 s, watch margin 5 s).

    The caller closes it (``await client.close()``)."""
    return Client(config_for_url(url), timeouts=Timeouts(connect=2.0, request=10.0, watch_margin=5.0))


async def eventually(
    check: Callable[[], Awaitable[Any]],
    timeout: float = 30.0,
    what: str = "condition",
    *,
    interval: float = 0.1,
    ignore: tuple[type[Exception], ...] = (),
) -> Any:
    """Poll the async ``check`` every ``interval`` seconds until it returns something truthy, and
    return that value (Gomega's ``Eventually``, as controller-runtime's envtest suites use it).

    ``check`` runs at least once and once more after ``timeout`` seconds have passed; an exception
    of a type in ``ignore`` (e.g. NotFound before the object exists) counts as "not yet".
    Raises AssertionError naming ``what``, the timeout and the last value when it never holds.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = await check()
        except ignore:
            last = None
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s (last: {last!r})")
        await asyncio.sleep(interval)


def b64(text: str) -> str:
    """``text`` UTF-8 encoded and base64 encoded, as a Secret's ``data`` values are."""
    return base64.b64encode(text.encode()).decode()


def vms_with_uid(si: Any, uid: str) -> list[Any]:
    """The vCenter VMs (pyVmomi ``vim.VirtualMachine``) whose extraConfig carries banlieue's UID
    key with value ``uid``, through the ServiceInstance ``si`` (blocking SOAP calls)."""
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    try:
        return [vm for vm in view.view if vm.config and any(o.key == UID_KEY and o.value == uid for o in vm.config.extraConfig)]
    finally:
        view.Destroy()
