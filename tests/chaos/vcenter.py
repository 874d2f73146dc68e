"""The vCenter side of the chaos suite: a restartable vcsim and an independent pyVmomi oracle.

``Vcenter`` wraps one ``bin/vcsim`` (started by :func:`banlieue.testing.vcsim.start_vcsim`) so a
scenario can kill it and start it again on the same port (``restart()``). vcsim keeps its
inventory in memory: a restarted simulator has the initial inventory again (templates, no
clones), and ``hack/vcsim`` generates a new CA at each start, so the restart scenario uses plain
http (``tls=False``; ``session.parse_endpoint`` accepts http for simulators).

``Oracle`` is the test's own pyVmomi session (TLS verified against the simulator's CA): it
counts banlieue's VMs by the ``banlieue.uid`` extraConfig key and by name, powers VMs off,
renames and destroys them behind banlieue's back, renames templates away and back, and ends
other sessions (``SessionManager.TerminateSession``, the way vcsim-notes.md says to force a
re-login).
"""

from __future__ import annotations

import contextlib
import ssl
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from pyVim import connect as _connect
from pyVmomi import vim as _vim
from pyVmomi import vmodl as _vmodl

from banlieue.testing.vcsim import VcsimProcess, start_vcsim

connect: Any = _connect
vim: Any = _vim
vmodl: Any = _vmodl

UID_KEY = "banlieue.uid"


@dataclass(frozen=True)
class SimVM:
    """One VM as the oracle sees it."""

    moref: str
    name: str
    uid: str | None
    power: str
    template: bool


class Vcenter:
    """One simulator that can be restarted on the same port (same endpoint for the Provider)."""

    def __init__(self, **opts: Any) -> None:
        self.opts = {"dc": 1, "cluster": 2, "host": 2, **opts}
        self.proc: VcsimProcess = start_vcsim(**self.opts)
        # A restart is the same vCenter (ADR 0013: another instance UUID would be refused).
        self.opts["instance_uuid"] = self.proc.info["instance_uuid"]
        self.port = self.proc.port
        self.restarts = 0

    @property
    def url(self) -> str:
        return self.proc.url

    @property
    def info(self) -> dict[str, Any]:
        return self.proc.info

    def kill(self) -> None:
        """SIGKILL the simulator (a vCenter outage); the port is released."""
        if self.proc.process.poll() is None:
            self.proc.process.kill()
            self.proc.process.wait(timeout=10)

    def restart(self) -> None:
        """Kill (if running) and start again on the same port with the same options and instance UUID."""
        self.kill()
        self.proc.stop()
        self.proc = start_vcsim(listen=f"127.0.0.1:{self.port}", **self.opts)
        assert self.proc.port == self.port, "vcsim restarted on another port"
        self.restarts += 1

    def stop(self) -> None:
        self.proc.stop()

    def oracle(self) -> Oracle:
        return Oracle(self.proc)


class Oracle:
    """The test's own pyVmomi session on a simulator (closed with ``close()``)."""

    def __init__(self, vc: VcsimProcess) -> None:
        context = ssl.create_default_context(cafile=vc.ca_file) if vc.tls else None
        self.si = connect.SmartConnect(protocol="https" if vc.tls else "http", host=vc.host, port=vc.port,
                                       user=vc.username, pwd=vc.password, sslContext=context)
        self.content = self.si.RetrieveContent()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            connect.Disconnect(self.si)

    def __enter__(self) -> Oracle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _vm_objects(self) -> list[tuple[Any, dict[str, Any]]]:
        view = self.content.viewManager.CreateContainerView(self.content.rootFolder, [vim.VirtualMachine], True)
        pc = vmodl.query.PropertyCollector
        spec = pc.FilterSpec(
            objectSet=[pc.ObjectSpec(obj=view, skip=True, selectSet=[
                pc.TraversalSpec(name="view", path="view", skip=False, type=vim.view.ContainerView)])],
            propSet=[pc.PropertySpec(type=vim.VirtualMachine,
                                     pathSet=["name", "runtime.powerState", "config.extraConfig", "config.template"])],
        )
        try:
            results = self.content.propertyCollector.RetrieveContents([spec])
        finally:
            view.Destroy()
        return [(r.obj, {p.name: p.val for p in r.propSet}) for r in results]

    def vms(self) -> list[SimVM]:
        """Every VM and template in the inventory."""
        out = []
        for obj, props in self._vm_objects():
            extra = {str(o.key): str(o.value) for o in props.get("config.extraConfig") or []}
            out.append(SimVM(obj._moId, str(props.get("name")), extra.get(UID_KEY), str(props.get("runtime.powerState")),
                             bool(props.get("config.template"))))
        return out

    def managed(self) -> list[SimVM]:
        """banlieue's VMs: those carrying the ``banlieue.uid`` extraConfig key."""
        return [v for v in self.vms() if v.uid]

    def duplicates(self) -> dict[str, list[str]]:
        """Duplicated UIDs and names among banlieue's VMs: ``{"uid:<uid>" | "name:<name>": [morefs]}``."""
        managed = self.managed()
        out: dict[str, list[str]] = {}
        for key, counts in (("uid", Counter(v.uid for v in managed)), ("name", Counter(v.name for v in managed))):
            for value, n in counts.items():
                if n > 1:
                    out[f"{key}:{value}"] = [v.moref for v in managed if getattr(v, key) == value]
        return out

    def _obj(self, moref: str) -> Any:
        return vim.VirtualMachine(moref, stub=self.si._stub)

    def _wait(self, task: Any) -> None:
        # vcsim completes tasks before the call returns; check the outcome anyway.
        info = task.info
        if info.state == "error":
            raise RuntimeError(f"task failed: {info.error}")

    def power_off(self, moref: str) -> None:
        self._wait(self._obj(moref).PowerOffVM_Task())

    def rename(self, moref: str, name: str) -> None:
        self._wait(self._obj(moref).Rename_Task(newName=name))

    def destroy(self, moref: str) -> None:
        vm = self._obj(moref)
        if str(vm.runtime.powerState) == "poweredOn":
            self._wait(vm.PowerOffVM_Task())
        self._wait(vm.Destroy_Task())

    def find_template(self, name: str) -> SimVM | None:
        return next((v for v in self.vms() if v.template and v.name == name), None)

    def session_keys(self) -> list[str]:
        return [s.key for s in self.content.sessionManager.sessionList or []]

    def terminate_other_sessions(self) -> int:
        """End every session but this one (their next call gets NotAuthenticated); returns how many."""
        own = self.content.sessionManager.currentSession.key
        others = [k for k in self.session_keys() if k != own]
        if others:
            self.content.sessionManager.TerminateSession(sessionId=others)
        return len(others)


class Guests:
    """DHCP + VMware Tools for the simulators (``banlieue.cmd.dev.GuestNetwork._assign``: every
    powered-on banlieue VM without an address gets ``SET.guest.ipAddress``), polled every
    ``interval`` s by a daemon thread through :class:`Oracle` sessions, so http simulators and
    restarted ones (new process, same port) are served too."""

    def __init__(self, vcenters: list[Vcenter], interval: float = 0.5) -> None:
        self.vcenters = vcenters
        self.interval = interval
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos guests", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        from banlieue.cmd.dev import GuestNetwork

        sessions: dict[int, Oracle] = {}
        leases: dict[int, dict[str, tuple[str, float]]] = {}
        try:
            while not self._stop.wait(self.interval):
                for index, vc in enumerate(self.vcenters):
                    try:
                        if index not in sessions:
                            sessions[index] = vc.oracle()
                        GuestNetwork._assign(sessions[index].si, 10 + index, leases.setdefault(index, {}))
                    except Exception:  # a simulator down or restarting, a session ended: retry next round
                        self.errors += 1
                        stale = sessions.pop(index, None)
                        if stale is not None:
                            stale.close()
        finally:
            for oracle in sessions.values():
                oracle.close()
