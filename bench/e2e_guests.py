"""Event-driven DHCP/VMware Tools stand-in for the e2e benchmark's vcsims.

``banlieue.cmd.dev.GuestNetwork`` (what ``make dev`` uses) re-reads every VM of every simulator
every 0.5 s; with 1,000 VMs that polling alone cost the two vcsims about as much CPU as the
manager (on a 2-core machine the benchmark shares with it). This variant asks each vcsim's
PropertyCollector for changes (``WaitForUpdatesEx`` on ``runtime.powerState`` and
``guest.ipAddress`` of every VM; plus a full read of those two properties every 5 s, since
vcsim's collector can miss a VM cloned into the container view) and gives each VM that is powered on without an address one (again after 5 s if it still has none),
``10.<subnet>.<n // 250>.<n % 250 + 2>``, through vcsim's ``SET.guest.ipAddress`` extraConfig
alias, from a few threads per simulator. Same contract as GuestNetwork: ``start()``, ``stop()``,
``assigned``, ``errors``.
"""

from __future__ import annotations

import contextlib
import queue
import ssl
import threading
import time
from typing import Any

ASSIGN_THREADS = 4
"""Reconfigure calls in flight per simulator."""


class EventGuestNetwork:
    """One watcher thread + ASSIGN_THREADS assigner threads per vcsim info dict."""

    def __init__(self, vcsims: list[dict[str, Any]]) -> None:
        self.vcsims = vcsims
        self.assigned = 0
        self.errors = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the threads (daemon)."""
        for index, info in enumerate(self.vcsims):
            work: queue.Queue[Any] = queue.Queue()
            self._threads.append(threading.Thread(target=self._watch, args=(info, 10 + index, work), daemon=True))
            self._threads += [threading.Thread(target=self._assign, args=(info, work), daemon=True)
                              for _ in range(ASSIGN_THREADS)]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """Ask the threads to stop (watchers notice within their 1 s long poll)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)

    @staticmethod
    def _connect(info: dict[str, Any]) -> Any:
        from pyVim.connect import SmartConnect

        context = ssl.create_default_context(cafile=info["ca_file"]) if info.get("ca_file") else None
        return SmartConnect(host=info["host"], port=int(info["port"]), user=info["username"], pwd=info["password"],
                            sslContext=context, connectionPoolTimeout=30)

    def _watch(self, info: dict[str, Any], subnet: int, work: queue.Queue[Any]) -> None:
        from pyVmomi import vim, vmodl

        pc = vmodl.query.PropertyCollector
        while not self._stop.is_set():
            try:
                si = self._connect(info)
                content = si.RetrieveContent()
                view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
                collector = content.propertyCollector.CreatePropertyCollector()
                collector.CreateFilter(pc.FilterSpec(
                    objectSet=[pc.ObjectSpec(obj=view, skip=True, selectSet=[
                        pc.TraversalSpec(name="view", path="view", skip=False, type=vim.view.ContainerView)])],
                    propSet=[pc.PropertySpec(type=vim.VirtualMachine, pathSet=["runtime.powerState", "guest.ipAddress"])],
                ), partialUpdates=True)
                state: dict[str, dict[str, Any]] = {}
                objs: dict[str, Any] = {}  # moref -> VM
                leases: dict[str, tuple[str, float]] = {}  # moref -> (address, monotonic time handed out)
                version = ""
                spec = pc.FilterSpec(
                    objectSet=[pc.ObjectSpec(obj=view, skip=True, selectSet=[
                        pc.TraversalSpec(name="view", path="view", skip=False, type=vim.view.ContainerView)])],
                    propSet=[pc.PropertySpec(type=vim.VirtualMachine, pathSet=["runtime.powerState", "guest.ipAddress"])])
                full_read = time.monotonic()
                while not self._stop.is_set():
                    if time.monotonic() - full_read > 5.0:
                        # vcsim's collector can miss a VM cloned into a container view: re-read
                        # every VM's two properties every 5 s as a safety net.
                        full_read = time.monotonic()
                        for r in content.propertyCollector.RetrieveContents([spec]):
                            objs[r.obj._moId] = r.obj
                            fresh = {p.name: p.val for p in r.propSet}
                            state[r.obj._moId] = {"runtime.powerState": fresh.get("runtime.powerState"),
                                                  "guest.ipAddress": fresh.get("guest.ipAddress")}
                    update = collector.WaitForUpdatesEx(version, pc.WaitOptions(maxWaitSeconds=1))
                    if update is not None:
                        version = update.version
                        for fs in update.filterSet or []:
                            for obj in fs.objectSet or []:
                                moref = obj.obj._moId
                                objs[moref] = obj.obj
                                props = state.setdefault(moref, {})
                                for change in obj.changeSet or []:
                                    props[change.name] = change.val
                    # Every VM powered on without an address gets one; again (the same one, a
                    # DHCP lease) when it still has none 5 s later: a power-on completing after
                    # the reconfigure can clear the guest's address in vcsim.
                    now = time.monotonic()
                    for moref, props in state.items():
                        if props.get("runtime.powerState") != "poweredOn" or props.get("guest.ipAddress"):
                            continue
                        lease = leases.get(moref)
                        if lease is not None and now - lease[1] < 5.0:
                            continue
                        ip = lease[0] if lease else f"10.{subnet}.{len(leases) // 250}.{len(leases) % 250 + 2}"
                        leases[moref] = (ip, now)
                        work.put((objs[moref], ip))
            except Exception:  # a simulator restarting or gone: reconnect
                with self._lock:
                    self.errors += 1
                self._stop.wait(0.5)

    def _assign(self, info: dict[str, Any], work: queue.Queue[Any]) -> None:
        from pyVmomi import vim

        si = None
        while not self._stop.is_set():
            try:
                vm, ip = work.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                if si is None:
                    si = self._connect(info)
                # A fresh stub-bound reference: pyVmomi objects are bound to the watcher's session.
                target = vim.VirtualMachine(vm._moId, si._stub)
                target.ReconfigVM_Task(spec=vim.vm.ConfigSpec(
                    extraConfig=[vim.option.OptionValue(key="SET.guest.ipAddress", value=ip)]))
                with self._lock:
                    self.assigned += 1
            except Exception:
                with self._lock:
                    self.errors += 1
                si = None
                work.put((vm, ip))  # retry with a new session
                self._stop.wait(0.2)
        if si is not None:
            from pyVim.connect import Disconnect

            with contextlib.suppress(Exception):
                Disconnect(si)
