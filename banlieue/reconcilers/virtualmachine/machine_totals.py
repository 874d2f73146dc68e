"""What the VSphereMachines no VirtualMachine owns reserve per (Provider, failure domain): the
machines created directly or by Cluster API count toward a domain's reservation like the VMs the
scheduler placed (issue 21: "the configured CPU, memory and disk of every VM banlieue placed in a
domain", whoever created it; docs/concepts.md "How capacity is counted").

A machine owned by a VirtualMachine (an ownerReference of kind ``VirtualMachine`` in
``banlieue.io``, or the ``banlieue.io/owned-by`` label the VirtualMachine controller sets) is
counted through its VirtualMachine's class (``placement_totals``) and left out here, so nothing is
counted twice. Any other machine contributes, from the moment it names where it goes until the
informer reports it deleted:

- where: ``status.failureDomain`` (what the provider role chose or recorded when it started the
  clone), else ``spec.failureDomain``, with ``spec.providerRef.name`` when set, else the
  Provider of the namespace that publishes that domain; a machine with no domain but a
  ``providerRef`` and raw ``datacenter``/``cluster``, the domain of that Provider with that
  ``attributes.raw`` pair. A machine none of these resolve (no Provider publishes it yet) counts
  nothing until one does: resolution happens when the scheduler reads the sums.
- what: ``spec.memoryMiB`` (0 when absent: the template's memory is not known here) and each
  disk's ``sizeGiB`` under its ``storageClass``, or, for a raw ``datastore``, under the storage
  class of the domain whose ``capacity.storageClasses[].datastore`` is
  ``<datacenter>/<datastore>`` (a datastore no storage class maps to is not one the scheduler
  reserves against). Without disks, nothing (the template's disk size is not known here).

Sums are kept per namespace and per *spot* (provider ref, domain, datacenter, cluster), which
are O(failure domains), from the VSphereMachine informer's events; each machine's contribution
is replaced, never added twice (relists and resyncs change nothing). Single event loop, no
locking (the informer calls the handlers inline).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from banlieue.api.provider import Provider, ProviderFailureDomain
from banlieue.reconcilers.kinds import LABEL_OWNED_BY
from banlieue.reconcilers.virtualmachine.scheduler import PeerTotals, Reserved
from banlieue.runtime.cache import KeyedStateHandler
from banlieue.runtime.event import Object, nested

Where = tuple[str, str]
"""(provider name, failure domain name)."""
Spot = tuple[str, str, str, str]
"""(providerRef name, failure domain, datacenter, cluster) as the machine names them ("" absent)."""
STORAGE_CLASS = "class:"
DATASTORE = "datastore:"


def owned_by_virtual_machine(obj: Object) -> bool:
    """Whether a VSphereMachine wire object belongs to a banlieue VirtualMachine (module docstring)."""
    for ref in nested(obj, "metadata", "ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("kind") == "VirtualMachine" and str(ref.get("apiVersion", "")).startswith("banlieue.io/"):
            return True
    labels = nested(obj, "metadata", "labels")
    return isinstance(labels, Mapping) and bool(labels.get(LABEL_OWNED_BY))


@dataclass(frozen=True, slots=True)
class Held:
    """One machine's contribution: where it names, its memory MiB and disks ``(key, GiB)`` with
    key ``class:<storage class>`` or ``datastore:<datastore>``."""

    namespace: str
    spot: Spot
    memory_mib: int
    disks: tuple[tuple[str, int], ...]

    @staticmethod
    def of(obj: Object) -> Held | None:
        """The contribution of ``obj``; None when a VirtualMachine owns it or it names no place.
        Never raises (an informer handler that raised would miss the event)."""
        if owned_by_virtual_machine(obj):
            return None
        spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
        assert isinstance(spec, Mapping)
        domain = nested(obj, "status", "failureDomain") or spec.get("failureDomain") or ""
        ref = nested(obj, "spec", "providerRef", "name") or ""
        dc, cluster = spec.get("datacenter") or "", spec.get("cluster") or ""
        if not domain and not (ref and dc and cluster):
            return None
        memory = spec.get("memoryMiB")
        disks: list[tuple[str, int]] = []
        for d in spec.get("disks") or ():
            if not isinstance(d, Mapping) or not isinstance(d.get("sizeGiB"), int):
                continue
            if d.get("storageClass"):
                disks.append((STORAGE_CLASS + str(d["storageClass"]), int(d["sizeGiB"])))
            elif d.get("datastore"):
                disks.append((DATASTORE + str(d["datastore"]), int(d["sizeGiB"])))
        spot = (sys.intern(str(ref)), sys.intern(str(domain)), sys.intern(str(dc) if not domain else ""),
                sys.intern(str(cluster) if not domain else ""))
        return Held(str(nested(obj, "metadata", "namespace") or ""), spot,
                    int(memory) if isinstance(memory, int) else 0, tuple(sorted(disks)))


@dataclass
class _Spot:
    machines: int = 0
    memory_mib: int = 0
    disks: dict[str, int] = field(default_factory=dict)

    def add(self, held: Held, sign: int) -> None:
        self.machines += sign
        self.memory_mib += sign * held.memory_mib
        for key, gib in held.disks:
            n = self.disks.get(key, 0) + sign * gib
            if n:
                self.disks[key] = n
            else:
                self.disks.pop(key, None)


class MachineReservations(KeyedStateHandler):
    """Per-namespace reservations of the VSphereMachines no VirtualMachine owns (module
    docstring), fed as a ``ResourceEventHandler`` of the VSphereMachine informer. Keys are the
    cache's ``<namespace>/<name>``."""

    def __init__(self) -> None:
        self._held: dict[str, Held] = {}
        self._sums: dict[str, dict[Spot, _Spot]] = {}

    # --- writes -----------------------------------------------------------------------------
    def observe(self, key: str, obj: Object) -> None:
        """The informer shows machine ``obj`` at ``key``."""
        after = Held.of(obj)
        before = self._held.get(key)
        if before == after:
            return
        if before is not None:
            self._add(before, -1)
        if after is None:
            self._held.pop(key, None)
        else:
            self._held[key] = after
            self._add(after, 1)

    def forget(self, key: str) -> None:
        """Machine ``key`` is gone."""
        before = self._held.pop(key, None)
        if before is not None:
            self._add(before, -1)

    def _add(self, held: Held, sign: int) -> None:
        spots = self._sums.setdefault(held.namespace, {})
        spot = spots.setdefault(held.spot, _Spot())
        spot.add(held, sign)
        if spot.machines == 0:
            del spots[held.spot]
            if not spots:
                del self._sums[held.namespace]

    # --- reads ------------------------------------------------------------------------------
    def reserved(self, namespace: str, providers: Iterable[Provider]) -> dict[Where, Reserved]:
        """(provider, domain) -> what the namespace's machines reserve there, resolved against
        ``providers`` (the namespace's; module docstring). Cost: O(spots x domains)."""
        spots = self._sums.get(namespace)
        if not spots:
            return {}
        by_name = {p.metadata.name or "": p for p in providers}
        out: dict[Where, Reserved] = {}
        for spot, held in spots.items():
            found = _resolve(spot, by_name)
            if found is None:
                continue
            provider, domain = found
            storage = _storage(held.disks, domain)
            where = (provider.metadata.name or "", domain.name)
            out[where] = out.get(where, Reserved()).plus(held.memory_mib, storage)
        return out


def _domains(p: Provider) -> Iterable[ProviderFailureDomain]:
    return (p.status.failure_domains if p.status is not None else None) or ()


def _resolve(spot: Spot, providers: Mapping[str, Provider]) -> tuple[Provider, ProviderFailureDomain] | None:
    ref, domain, dc, cluster = spot
    candidates = [providers[ref]] if ref else list(providers.values())
    if ref and ref not in providers:
        return None
    for p in candidates:
        for d in _domains(p):
            raw = d.attributes.raw if d.attributes is not None else None
            if domain and d.name == domain:
                return p, d
            if not domain and raw is not None and raw.datacenter == dc and raw.cluster == cluster:
                return p, d
    return None


def _storage(disks: Mapping[str, int], domain: ProviderFailureDomain) -> dict[str, int]:
    """Disk GiB per storage class name of ``domain`` (raw datastores mapped to the class that
    stores onto ``<datacenter>/<datastore>``)."""
    cap = domain.attributes.capacity if domain.attributes is not None else None
    raw = domain.attributes.raw if domain.attributes is not None else None
    by_datastore = {e.datastore: e.name for e in (cap.storage_classes if cap is not None else None) or ()}
    out: dict[str, int] = {}
    for key, gib in disks.items():
        name: str | None = None
        if key.startswith(STORAGE_CLASS):
            name = key[len(STORAGE_CLASS):]
        elif raw is not None and raw.datacenter:
            name = by_datastore.get(f"{raw.datacenter}/{key[len(DATASTORE):]}")
        if name:
            out[name] = out.get(name, 0) + gib
    return out


def standalone_changed(old: Object, new: Object) -> bool:
    """Update predicate: the reservation of a machine no VirtualMachine owns changed (moved,
    resized, or it stopped counting): a VM refused for capacity may fit now."""
    before, after = Held.of(old), Held.of(new)
    # Its addresses too: a standalone machine may hold a VM's static address (AddressConflict).
    network = nested(old, "spec", "network") != nested(new, "spec", "network")
    return (before != after and before is not None) or network


def with_machines(totals: PeerTotals, machines: Mapping[Where, Reserved]) -> PeerTotals:
    """``totals`` with ``machines``' reservations added to ``reserved`` (rule 5 of the scheduler)."""
    if not machines:
        return totals
    reserved: dict[Where, Reserved] = dict(totals.reserved)
    for where, held in machines.items():
        reserved[where] = reserved.get(where, Reserved()).plus(held.memory_mib, held.storage_gib)
    return replace(totals, reserved=reserved)

