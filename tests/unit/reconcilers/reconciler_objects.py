"""API objects the placement unit tests share (VirtualMachine scheduler and decide, VSphereCluster
decide): failure domains as a Provider reports them, Providers, VMClasses and VMImages in
namespace ``NS``.

Imported as ``from reconciler_objects import ...``: this directory is on ``sys.path`` (pytest's
default ``prepend`` import mode puts it there when it loads the conftest.py beside it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from banlieue.api.provider import Provider, ProviderImageStatus, ProviderStatus
from banlieue.api.vmclass import VMClass
from banlieue.api.vmimage import VMImage

NS = "default"


def fd(name: str, dc: str = "dc0", cluster: str = "c0", *, mem: int | None = 65536, storage: int | None = 1000,
       cpu: int | None = 10000, sc: tuple[str, ...] = ("standard",), nc: tuple[str, ...] = ("default",),
       features: tuple[str, ...] = ("bios", "efi", "efi-secure")) -> dict[str, Any]:
    cap = {k: v for k, v in (("memoryMiB", mem), ("storageGiB", storage), ("cpuMHz", cpu)) if v is not None}
    return {"name": name, "labels": {"dc": dc, "cluster": cluster}, "attributes": {
        "availableStorageClasses": list(sc), "availableNetworkClasses": list(nc), "features": list(features),
        "capacity": cap, "raw": {"datacenter": dc.upper(), "cluster": cluster.upper()}}}


def provider(name: str, domains: list[dict[str, Any]], labels: dict[str, str] | None = None,
             pclass: str = "vsphere", features: tuple[str, ...] = ()) -> Provider:
    return Provider.from_wire({
        "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
        "spec": {"providerClassRef": {"name": pclass}, "connection": {"endpoint": "vc", "credentialsRef": {"name": "s"}},
                 "capabilities": {"storageClasses": [{"name": "standard", "target": {"datastore": "DS0"}}],
                                  "networkClasses": [{"name": "default", "target": {"portGroup": "VM Network"}}],
                                  "features": list(features)}},
        "status": {"failureDomains": domains},
    })


def vm_class(*, mem: int = 4096, disks: tuple[int, ...] = (20,), firmware: str = "efi",
             features: tuple[str, ...] = (), sc: str = "standard", nc: str = "default") -> VMClass:
    return VMClass.from_wire({"metadata": {"name": "small"}, "spec": {
        "hardware": {"cpus": 2, "memoryMiB": mem,
                     "disks": [{"name": f"d{i}", "sizeGiB": s, "storageClass": sc} for i, s in enumerate(disks)]},
        "network": {"interfaces": [{"name": "eth0", "networkClass": nc}]},
        "firmware": firmware, "features": list(features)}})


READY_ON = "test.banlieue.io/ready-on"
"""Annotation of a test VMImage: JSON {provider name: ready}; ``with_rows`` copies it into the
Providers' ``status.images`` (where the scheduler reads it since issue 23)."""


def image(ready: dict[str, bool] | None = None, classes: tuple[str, ...] = ("vsphere",)) -> VMImage:
    return VMImage.from_wire({"metadata": {"name": "ubuntu", "annotations": {READY_ON: json.dumps(ready or {})}}, "spec": {
        "sources": [{"providerClass": c, "kind": "Template", "ref": "ubuntu-tpl"} for c in classes]}})


def with_rows(providers: Iterable[Provider], img: VMImage | None) -> tuple[Provider, ...]:
    """``providers`` with the ``status.images`` row of ``img`` its annotation ``READY_ON`` asks
    for (a Provider it does not name gets no row)."""
    ready: dict[str, bool] = json.loads(((img.metadata.annotations or {}).get(READY_ON) or "{}") if img else "{}")
    out = []
    for p in providers:
        r = ready.get(p.metadata.name or "")
        if r is None or img is None:
            out.append(p)
            continue
        row = ProviderImageStatus(name=img.metadata.name or "", ready=r, reason="Reconciled" if r else "TemplateNotFound",
                                  message="" if r else "template ubuntu not found")
        status = (p.status or ProviderStatus()).model_copy(update={"images": [row]})
        out.append(p.model_copy(update={"status": status}))
    return tuple(out)
