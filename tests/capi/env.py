"""Harness of the issue-7 acceptance tests: the API-server double (in-process, HTTP), two vcsims
(two vCenters of 1 datacenter x 3 clusters), two vSphere Providers with their Secrets, the CAPI
CRDs, and ``banlieue manager`` as a subprocess with a kubeconfig (``python -m banlieue.cli
manager``): the most honest way to run the product. ``VSphereOracle`` reads vcsim through its own
pyVmomi session (TLS verified against vcsim's CA), independent of banlieue's backend.

pyVmomi calls block: the async helpers run them in a thread so that the in-process API server,
which the manager talks to, keeps serving.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from pyVim.connect import Disconnect, SmartConnect
from pyVmomi import vim

from banlieue.cmd.dev import free_ports
from banlieue.reconcilers.kinds import PROVIDER, VSPHERE_CLUSTER, VSPHERE_MACHINE, VSPHERE_MACHINE_TEMPLATE
from banlieue.runtime.client import Client
from banlieue.runtime.kinds import SECRET
from banlieue.testing.capi import check_loopback
from banlieue.testing.vcsim import VcsimProcess

T = TypeVar("T")
MANAGER_STARTUP_TIMEOUT = 30.0  # seconds until /readyz answers 200
MANAGER_STOP_TIMEOUT = 40.0  # seconds after SIGTERM (graceful shutdown is at most 30 s)
UID_KEY = "banlieue.uid"  # extraConfig key holding the VSphereMachine's UID (backends/vsphere/find.py)


async def eventually(check: Callable[[], Awaitable[T | None]], *, timeout: float, what: str, interval: float = 0.2) -> T:
    """Await ``check()`` until it returns a truthy value; AssertionError naming ``what`` and the
    last value after ``timeout`` seconds. Exceptions from ``check`` (e.g. a contract violation)
    propagate at once."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@dataclass
class VMLocation:
    """Where a VM is in vcsim, as vSphere reports it."""

    vcenter: str
    name: str
    datacenter: str
    cluster: str
    power_state: str
    extra_config: dict[str, str]


class VSphereOracle:
    """One pyVmomi session per vcsim (keyed by Provider name)."""

    def __init__(self, vcsims: dict[str, VcsimProcess]) -> None:
        self.sessions: dict[str, Any] = {}
        for name, vc in vcsims.items():
            ctx = ssl.create_default_context(cafile=vc.ca_file)
            self.sessions[name] = SmartConnect(host=vc.host, port=vc.port, user=vc.username, pwd=vc.password, sslContext=ctx)

    def close(self) -> None:
        for si in self.sessions.values():
            Disconnect(si)

    @staticmethod
    def _datacenter(vm: Any) -> str:
        obj = vm.parent
        while obj is not None and not isinstance(obj, vim.Datacenter):
            obj = obj.parent
        return str(obj.name) if obj is not None else ""

    def _vms(self, si: Any) -> list[Any]:
        content = si.RetrieveContent()
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        try:
            return [vm for vm in view.view if vm.config is not None and not vm.config.template]
        finally:
            view.Destroy()

    def locate_by_bios_uuid(self, bios_uuid: str) -> list[VMLocation]:
        """Every VM with this BIOS UUID, across all vCenters (expected: exactly one)."""
        out = []
        for vcenter, si in self.sessions.items():
            vm = si.content.searchIndex.FindByUuid(None, bios_uuid, True, False)
            if vm is not None:
                out.append(self._location(vcenter, vm))
        return out

    def _location(self, vcenter: str, vm: Any) -> VMLocation:
        owner = vm.resourcePool.owner if vm.resourcePool is not None else None
        return VMLocation(vcenter=vcenter, name=str(vm.name), datacenter=self._datacenter(vm),
                          cluster=str(owner.name) if isinstance(owner, vim.ClusterComputeResource) else "",
                          power_state=str(vm.runtime.powerState),
                          extra_config={str(o.key): str(o.value) for o in vm.config.extraConfig})

    def find(self, *, name: str | None = None, uid: str | None = None) -> list[VMLocation]:
        """Every VM named ``name`` or carrying the object UID ``uid``, across all vCenters."""
        out = []
        for vcenter, si in self.sessions.items():
            for vm in self._vms(si):
                keys = {o.key: o.value for o in vm.config.extraConfig}
                if (name is not None and vm.name == name) or (uid is not None and keys.get(UID_KEY) == uid):
                    out.append(self._location(vcenter, vm))
        return out

    def inventory(self) -> set[tuple[str, str]]:
        """(vCenter, VM name) of every VM (not templates) in every vcsim."""
        return {(vcenter, str(vm.name)) for vcenter, si in self.sessions.items() for vm in self._vms(si)}

    def set_guest_ip(self, bios_uuid: str, ip: str) -> None:
        """Make "VMware Tools" report ``ip`` (vcsim: the ``SET.guest.ipAddress`` extraConfig alias)."""
        for si in self.sessions.values():
            vm = si.content.searchIndex.FindByUuid(None, bios_uuid, True, False)
            if vm is not None:
                task = vm.ReconfigVM_Task(spec=vim.vm.ConfigSpec(extraConfig=[vim.option.OptionValue(key="SET.guest.ipAddress", value=ip)]))
                while task.info.state not in ("success", "error"):
                    time.sleep(0.05)
                assert task.info.state == "success", f"setting the guest IP of {bios_uuid}: {task.info.error}"


@dataclass
class CapiEnv:
    """The running environment of one acceptance test."""

    client: Client
    namespace: str
    kubeconfig: Path
    vcsims: dict[str, VcsimProcess]
    oracle: VSphereOracle
    log_path: Path
    manager: asyncio.subprocess.Process | None = None
    probes_url: str = ""
    notes: list[str] = field(default_factory=list)

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    async def create_providers(self) -> None:
        """One Secret + Provider per vcsim: storage class ``standard`` -> ``LocalDS_0``, network
        class ``default`` -> port group ``VM Network``, the CA as ``caBundle.inline``."""
        for name, vc in self.vcsims.items():
            await self.client.create(SECRET, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-credentials", "namespace": self.namespace},
                                              "stringData": {"username": vc.username, "password": vc.password}})
            provider = {
                "apiVersion": PROVIDER.api_version, "kind": "Provider", "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"providerClassRef": {"name": "vsphere"},
                         "connection": {"endpoint": vc.url, "credentialsRef": {"name": f"{name}-credentials"}, "caBundle": {"inline": vc.ca_pem}},
                         "capabilities": {"storageClasses": [{"name": "standard", "target": {"datastore": "LocalDS_0"}}],
                                          "networkClasses": [{"name": "default", "target": {"portGroup": "VM Network"}}]}},
            }
            check_loopback([provider])  # the network rule: the vCenter URL is on loopback
            await self.client.create(PROVIDER, provider)

    async def start_manager(self) -> None:
        """``python -m banlieue.cli manager`` on free 127.0.0.1 ports; waits for ``/readyz``."""
        metrics, probes = free_ports(2)
        self.probes_url = f"http://127.0.0.1:{probes}"
        with self.log_path.open("wb") as sink:
            self.manager = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "banlieue.cli", "manager", "--kubeconfig", str(self.kubeconfig),
                "--metrics-bind-address", f"127.0.0.1:{metrics}", "--health-probe-bind-address", f"127.0.0.1:{probes}",
                "--log-format", "console", "--log-level", "info",
                stdin=asyncio.subprocess.DEVNULL, stdout=sink, stderr=sink)
        manager = self.manager

        async def ready() -> bool:
            if manager.returncode is not None:
                raise AssertionError(f"banlieue manager exited with {manager.returncode}:\n{self.log_tail()}")
            try:
                async with aiohttp.ClientSession() as s, s.get(self.probes_url + "/readyz", timeout=aiohttp.ClientTimeout(total=2)) as r:
                    return r.status == 200
            except (aiohttp.ClientError, TimeoutError):
                return False

        await eventually(ready, timeout=MANAGER_STARTUP_TIMEOUT, what="banlieue manager /readyz 200", interval=0.25)

    async def stop_manager(self) -> int | None:
        """SIGTERM, then kill after ``MANAGER_STOP_TIMEOUT`` s; returns the exit code."""
        proc = self.manager
        if proc is None:
            return None
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), MANAGER_STOP_TIMEOUT)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        return proc.returncode

    async def wait_providers_ready(self, timeout: float = 30.0) -> dict[str, list[dict[str, Any]]]:
        """Every Provider Ready True with 3 failure domains; returns name -> failure domains."""
        async def check() -> dict[str, list[dict[str, Any]]] | None:
            out = {}
            for name in self.vcsims:
                p = await self.client.get(PROVIDER, name, self.namespace)
                ready = [c for c in (p.get("status") or {}).get("conditions") or () if c["type"] == "Ready"]
                fds = (p.get("status") or {}).get("failureDomains") or []
                if not ready or ready[0]["status"] != "True" or len(fds) != 3:
                    return None
                out[name] = fds
            return out
        try:
            return await eventually(check, timeout=timeout, what="Providers Ready with 3 failure domains each")
        except AssertionError:
            states = {n: (await self.client.get(PROVIDER, n, self.namespace)).get("status") for n in self.vcsims}
            raise AssertionError(f"Providers not Ready: {states}\nmanager log:\n{self.log_tail()}") from None

    async def create_cluster_infra(self, name: str, control_plane_selector: dict[str, Any] | None = None) -> None:
        """The VSphereCluster over both Providers, with a control-plane endpoint (VIP) and
        optionally ``spec.controlPlaneFailureDomainSelector``."""
        spec: dict[str, Any] = {"controlPlaneEndpoint": {"host": "127.17.0.100", "port": 6443}, "providerRefs": [{"name": n} for n in self.vcsims]}
        if control_plane_selector is not None:
            spec["controlPlaneFailureDomainSelector"] = control_plane_selector
        await self.client.create(VSPHERE_CLUSTER, {
            "apiVersion": VSPHERE_CLUSTER.api_version, "kind": "VSphereCluster", "metadata": {"name": name, "namespace": self.namespace},
            "spec": spec,
        })

    async def create_template(self, name: str) -> dict[str, Any]:
        """A VSphereMachineTemplate naming no Provider/datacenter/cluster, with abstract storage
        and network classes (so one template serves every failure domain of both vCenters)."""
        return await self.client.create(VSPHERE_MACHINE_TEMPLATE, {
            "apiVersion": VSPHERE_MACHINE.api_version, "kind": "VSphereMachineTemplate", "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"template": {"metadata": {"labels": {"pool": "control-plane"}}, "spec": {
                "template": "ubuntu-22.04", "numCPUs": 1, "memoryMiB": 512,
                "disks": [{"name": "os", "sizeGiB": 10, "storageClass": "standard"}],  # the template's size (vcsim 0.56)
                "network": {"devices": [{"name": "eth0", "networkClass": "default", "dhcp4": True}]},
                "powerOffMode": "hard"}}},
        })

    async def locate(self, bios_uuid: str) -> list[VMLocation]:
        return await asyncio.to_thread(self.oracle.locate_by_bios_uuid, bios_uuid)

    async def find_vms(self, *, name: str | None = None, uid: str | None = None) -> list[VMLocation]:
        return await asyncio.to_thread(self.oracle.find, name=name, uid=uid)

    async def set_guest_ip(self, bios_uuid: str, ip: str) -> None:
        await asyncio.to_thread(self.oracle.set_guest_ip, bios_uuid, ip)

    async def inventory(self) -> set[tuple[str, str]]:
        return await asyncio.to_thread(self.oracle.inventory)

    async def close(self) -> None:
        code = await self.stop_manager()
        with contextlib.suppress(Exception):  # teardown must go on: the sessions die with vcsim anyway
            await asyncio.to_thread(self.oracle.close)
        await self.client.close()
        if code not in (0, None):
            self.notes.append(f"manager exit code {code}")

