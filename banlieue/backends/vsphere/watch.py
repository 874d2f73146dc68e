"""Change notifications from one vCenter: a PropertyCollector long poll (``WaitForUpdatesEx``).

One dedicated collector with one filter (every VM, found by the inventory traversal) per watch.
The long poll runs on its own thread and its own SOAP stub (sharing the session cookie), with a
socket timeout above ``max_wait_seconds``, so it never occupies a worker of the vCenter's pool and
the pool's request timeout stays short. Steady state costs one outstanding request per vCenter,
renewed every ``max_wait_seconds`` (default 600 s: 6 requests per hour per vCenter) and
never per VM.

Watched paths: ``runtime.powerState``, ``guest.ipAddress``, ``guest.net``, ``config.instanceUuid``,
``config.extraConfig`` (the UID), ``config.template``. Objects leaving the filter ("leave") are
removals. After a re-login the collector is recreated and the first batch (every managed VM,
"modified") is a resync: nothing missed while the session was gone is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog
from pyVmomi import SoapAdapter as _soap
from pyVmomi import vim as _vim
from pyVmomi import vmodl as _vmodl

from banlieue.backends.base import VMChange
from banlieue.backends.vsphere.faults import map_exception
from banlieue.backends.vsphere.find import UID_KEY, VMIndex
from banlieue.backends.vsphere.properties import PC, moid, vm_traversal
from banlieue.backends.vsphere.session import Session, ssl_context

# pyVmomi's partial stubs make its constructors untyped calls; treat the namespaces as Any.
vim: Any = _vim
vmodl: Any = _vmodl
SoapStubAdapter: Any = _soap.SoapStubAdapter

log = structlog.get_logger("banlieue.backends.vsphere.watch")

WATCH_PATHS = [
    "runtime.powerState",
    "guest.ipAddress",
    "guest.net",
    "config.instanceUuid",
    "config.extraConfig",
    "config.template",
]


class VMWatch:
    """The blocking half of a watch: collector setup, one long poll, teardown."""

    def __init__(self, session: Session, max_wait_seconds: float, index: VMIndex) -> None:
        self.session = session
        self.index = index
        self.max_wait = max_wait_seconds
        self.stub: Any = None
        self.collector: Any = None
        self.version = ""
        self.known: dict[str, tuple[str | None, str | None]] = {}  # moref -> (uid, instance uuid)

    def _make_stub(self) -> Any:
        s = self.session
        url = f"{s.protocol}://{s.host}:{s.port}/sdk"
        stub = SoapStubAdapter(
            url=url,
            version=s.stub.version,
            sslContext=ssl_context(s.conn) if s.protocol == "https" else None,
            httpConnectionTimeout=self.max_wait + 60,
            connectionPoolTimeout=-1,
            poolSize=1,
        )
        s.endpoint.instrument(stub)
        return stub

    def setup(self) -> None:
        """Create the collector and its filter on the current session (3 SOAP calls)."""
        if self.stub is None:
            self.stub = self._make_stub()
        self.stub.SetSessionId(self.session.stub.GetSessionId())
        root_pc = vmodl.query.PropertyCollector(moid(self.session.content.propertyCollector), self.stub)
        self.collector = root_pc.CreatePropertyCollector()
        root = vim.Folder(moid(self.session.content.rootFolder), self.stub)
        spec = PC.FilterSpec(
            objectSet=[PC.ObjectSpec(obj=root, skip=False, selectSet=vm_traversal())],
            propSet=[PC.PropertySpec(type=vim.VirtualMachine, pathSet=WATCH_PATHS)],
        )
        self.collector.CreateFilter(spec, partialUpdates=False)
        self.version = ""

    def poll(self) -> list[VMChange]:
        """One WaitForUpdatesEx (blocks up to max_wait seconds); re-login on NotAuthenticated."""
        try:
            if self.collector is None:
                self.setup()
            update = self.collector.WaitForUpdatesEx(self.version, PC.WaitOptions(maxWaitSeconds=int(self.max_wait)))
        except (vim.fault.NotAuthenticated, vmodl.fault.ManagedObjectNotFound):
            self.index.authoritative = False
            # The session ended (or the collector went with it): share the pool's session,
            # logging in again if that one is the dead one too, then resync.
            if self.stub.GetSessionId() == self.session.stub.GetSessionId():
                self.session.relogin(self.session.generation)
            self.collector = None
            return []
        except Exception as exc:
            raise map_exception(exc) from exc
        if update is None:
            return []
        full = self.version == ""
        self.version = update.version
        changes = self._changes(update)
        # Update the index here, as the batch arrives, not when the consumer gets to it.
        for change in changes:
            if change.uid is None:
                continue
            if change.kind == "removed":
                self.index.forget(change.uid)
            else:
                self.index.put(change.uid, vim.VirtualMachine(change.moref, self.session.stub))
        if full:
            self.index.authoritative = True
        return changes

    def _changes(self, update: Any) -> list[VMChange]:
        out: list[VMChange] = []
        for fs in update.filterSet or []:
            for oc in fs.objectSet or []:
                ref = moid(oc.obj)
                if oc.kind == "leave":
                    uid, iu = self.known.pop(ref, (None, None))
                    if uid is not None:
                        out.append(VMChange(self.session.endpoint.label, ref, uid, iu, "removed"))
                    continue
                uid, iu = self.known.get(ref, (None, None))
                template = False
                for change in oc.changeSet or []:
                    if change.name == "config.extraConfig":
                        uid = next((str(o.value) for o in change.val or [] if o.key == UID_KEY), None)
                    elif change.name == "config.instanceUuid":
                        iu = str(change.val) if change.val else None
                    elif change.name == "config.template":
                        template = bool(change.val)
                self.known[ref] = (uid, iu)
                if uid is not None and not template:
                    out.append(VMChange(self.session.endpoint.label, ref, uid, iu, "modified"))
        return out

    def cancel(self) -> None:
        """Unblock a pending long poll (CancelWaitForUpdates) and destroy the collector."""
        collector, self.collector = self.collector, None
        if collector is None:
            return
        with contextlib.suppress(Exception):
            pc = vmodl.query.PropertyCollector(moid(collector), self.session.stub)
            pc.CancelWaitForUpdates()
            pc.DestroyPropertyCollector()


async def watch_vms(session: Session, index: VMIndex, max_wait_seconds: float) -> AsyncIterator[VMChange]:
    """Yield VMChange for banlieue-managed VMs until the consumer stops (see module docstring).

    Transient errors (vCenter unreachable) are retried with back-off (1 s doubling to 60 s);
    other BackendErrors end the iteration by raising.
    """
    w = VMWatch(session, max_wait_seconds, index)
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"vsphere-watch-{session.endpoint.label}")
    loop = asyncio.get_running_loop()
    backoff = 1.0
    try:
        while True:
            try:
                changes = await loop.run_in_executor(thread, w.poll)
                backoff = 1.0
            except Exception as exc:
                err = map_exception(exc)
                if err.reason not in ("ConnectFailed", "Timeout", "Transient", "RequestCanceled"):
                    raise err from exc
                log.warning("vsphere watch failed; retrying", vcenter=session.endpoint.label, reason=err.reason)
                w.collector = None
                index.authoritative = False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 60.0)
                continue
            for change in changes:
                yield change
    finally:
        index.authoritative = False
        await loop.run_in_executor(session.endpoint.pool, w.cancel)
        thread.shutdown(wait=False, cancel_futures=True)
