"""A polling stand-in for DHCP and VMware Tools on simulators started without ``guest_ip``.

vcsim guests never report an address on their own. The simulator harness does it natively:
``start_vcsim(guest_ip=CIDR)`` / ``bin/vcsim --guest-ip=CIDR`` (``hack/vcsim/guestnet.go``), which
``banlieue dev`` and the e2e tests use. This module is the client-side fallback for a simulator
that was started without that option (tests/chaos restarts simulators of its own): a thread
polls each simulator over SOAP and sets vcsim's ``SET.guest.ipAddress`` extraConfig alias on
every powered-on banlieue VM (extraConfig ``banlieue.uid``) that reports no address, to its
first static guestinfo address, else ``10.<subnet>.<n // 250>.<n % 250 + 2>``.

Also home of ``GUEST_IP_RANGES``, the ranges the native option leases from (here, not in
``banlieue.testing.vcsim``, so ``banlieue dev`` needs no pytest).

Public API: :func:`static_address`, :class:`GuestNetwork` (``start()``, ``stop()``, counters
``assigned`` and ``errors``; ``GuestNetwork._assign(si, subnet, leases)`` does one round on one
pyVmomi ServiceInstance).
"""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
from typing import Any

import structlog

log = structlog.get_logger("banlieue.testing.guestnet")

GUEST_IP_RANGES = ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
"""Ranges for the simulator's ``--guest-ip`` (``start_vcsim(guest_ip=...)``): the RFC 5737
documentation ranges TEST-NET-1..3, one per simulator. The simulator only reports these addresses
as strings; nothing ever connects to them."""


def static_address(extra_config: dict[str, str]) -> str | None:
    """The first static IPv4/IPv6 address (without prefix length) in the cloud-init network config
    banlieue put in ``guestinfo.metadata``, i.e. what a statically configured guest reports;
    None when every NIC uses DHCP or the metadata is missing or unreadable."""
    from banlieue.backends.vsphere import guestinfo

    try:
        md, _ = guestinfo.decode(extra_config)
        ethernets = ((md or {}).get("network") or {}).get("ethernets") or {}
        for eth in ethernets.values():
            for address in eth.get("addresses") or []:
                return str(address).split("/", 1)[0]
    except (ValueError, TypeError, AttributeError):
        return None
    return None


class GuestNetwork:
    """Plays DHCP and VMware Tools for vcsim, whose guests never report an address on their own.

    A daemon thread polls each simulator every ``interval`` seconds (one RetrieveContents) and
    gives every powered-on VM that banlieue created (extraConfig ``banlieue.uid``) and that reports
    no ``guest.ipAddress`` an address: its first static address from the guestinfo metadata
    (:func:`static_address`), else ``10.<subnet>.<n // 250>.<n % 250 + 2>`` (DHCP; one subnet per
    simulator), through vcsim's ``SET.guest.ipAddress`` extraConfig alias (what VMware Tools
    would report). ``vcsims`` are vcsim info files (url, host, port, username,
    password, ca_file). ``assigned`` counts addresses handed out; ``errors`` failed polls.
    """

    def __init__(self, vcsims: list[dict[str, Any]], interval: float = 0.5) -> None:
        self.vcsims = vcsims
        self.interval = interval
        self.assigned = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="guest network", daemon=True)

    def start(self) -> None:
        """Start the polling thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop polling and wait (at most 10 s) for the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        from pyVim import connect as _connect

        connect: Any = _connect  # pyVmomi ships partial stubs: untyped calls
        sessions: dict[int, Any] = {}
        leases: dict[int, dict[str, tuple[str, float]]] = {}
        try:
            while not self._stop.wait(self.interval):
                for index, info in enumerate(self.vcsims):
                    try:
                        if index not in sessions:
                            context = ssl.create_default_context(cafile=info["ca_file"]) if info.get("ca_file") else None
                            sessions[index] = connect.SmartConnect(
                                host=info["host"], port=int(info["port"]), user=info["username"],
                                pwd=info["password"], sslContext=context, connectionPoolTimeout=10,
                            )
                        self.assigned += self._assign(sessions[index], 10 + index, leases.setdefault(index, {}))
                    except Exception as err:  # a simulator restarting or gone: retry next round
                        self.errors += 1
                        sessions.pop(index, None)
                        log.debug("guest network poll failed", vcenter=info.get("url"), error=str(err))
        finally:
            for si in sessions.values():
                with contextlib.suppress(Exception):
                    connect.Disconnect(si)

    @staticmethod
    def _assign(si: Any, subnet: int, leases: dict[str, tuple[str, float]]) -> int:
        from pyVmomi import vim as _vim
        from pyVmomi import vmodl as _vmodl

        vim: Any = _vim
        vmodl: Any = _vmodl
        content = si.RetrieveContent()
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        pc = vmodl.query.PropertyCollector
        spec = pc.FilterSpec(
            objectSet=[pc.ObjectSpec(obj=view, skip=True, selectSet=[
                pc.TraversalSpec(name="view", path="view", skip=False, type=vim.view.ContainerView)])],
            propSet=[pc.PropertySpec(type=vim.VirtualMachine,
                                     pathSet=["runtime.powerState", "guest.ipAddress", "config.extraConfig"])],
        )
        try:
            results = content.propertyCollector.RetrieveContents([spec])
        finally:
            view.Destroy()
        handed = 0
        for result in results:
            props = {p.name: p.val for p in result.propSet}
            extra = {str(o.key): str(o.value) for o in props.get("config.extraConfig") or []}
            if "banlieue.uid" not in extra or props.get("runtime.powerState") != "poweredOn":
                continue
            if props.get("guest.ipAddress"):
                continue
            moref = result.obj._moId
            lease = leases.get(moref)
            if lease is not None and time.monotonic() - lease[1] < 5.0:
                continue  # just handed out; the reconfigure may still be running
            if lease is not None:
                ip = lease[0]  # the same VM asks again: same address (a DHCP lease)
            else:
                number = len(leases)
                ip = static_address(extra) or f"10.{subnet}.{number // 250}.{number % 250 + 2}"
            result.obj.ReconfigVM_Task(spec=vim.vm.ConfigSpec(
                extraConfig=[vim.option.OptionValue(key="SET.guest.ipAddress", value=ip)]))
            leases[moref] = (ip, time.monotonic())
            handed += lease is None
        return handed
