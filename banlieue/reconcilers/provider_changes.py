"""Which Provider changes matter to whom (predicates shared by the VirtualMachine and
VSphereMachine controllers).

The Provider controller rewrites each domain's reported capacity
(``status.failureDomains[].attributes.capacity``, with its ``updateTime``) about every 30 s
while VMs come and go, and a few seconds after each machine is provisioned or deleted. Only
objects still waiting for room can be decided by a capacity: mapping each rewrite to every
object placed on the Provider made a wave's reconciles grow with the square of its machines
(1,000 CAPI machines: 142,000 VSphereMachine reconciles in 12 minutes with the Cluster status
rewrites, the workers too busy to clone; docs/performance.md). So each controller watches
Providers twice: ``PROVIDER_CHANGED`` (anything but capacity) to what uses the Provider, and
``PROVIDER_CAPACITY_CHANGED`` (capacity) to what waits for room only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from banlieue.runtime.event import Object
from banlieue.runtime.predicate import Predicate

__all__ = ["PROVIDER_CAPACITY_CHANGED", "PROVIDER_CHANGED", "Projected", "provider_capacity", "provider_without_capacity"]


class Projected(Predicate):
    """Passes an update when ``project(old) != project(new)``; creates and deletes pass.
    Resyncs (old == new) never pass."""

    def __init__(self, project: Callable[[Object], Any]) -> None:
        self.project = project

    def update(self, old: Object, new: Object) -> bool:
        return bool(self.project(old) != self.project(new))


def _domains(obj: Object) -> list[Any]:
    status = obj.get("status")
    domains = status.get("failureDomains") if isinstance(status, Mapping) else None
    return list(domains) if isinstance(domains, list) else []


def provider_without_capacity(obj: Object) -> Any:
    """A Provider less its domains' reported capacity and the bookkeeping fields every write
    changes (``metadata.resourceVersion``, ``metadata.managedFields``): (metadata, spec, status)."""
    raw_meta = obj.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    status = dict(obj.get("status") or {})
    domains = []
    for d in _domains(obj):
        if isinstance(d, Mapping):
            attrs = {k: v for k, v in (d.get("attributes") or {}).items() if k != "capacity"}
            d = {**d, "attributes": attrs}
        domains.append(d)
    status["failureDomains"] = domains
    return ({k: v for k, v in meta.items() if k not in ("resourceVersion", "managedFields")}, obj.get("spec"), status)


def provider_capacity(obj: Object) -> dict[Any, Any]:
    """The domains' reported capacity of a Provider, by domain name."""
    return {d.get("name"): (d.get("attributes") or {}).get("capacity") for d in _domains(obj) if isinstance(d, Mapping)}


PROVIDER_CHANGED: Final = Projected(provider_without_capacity)
"""A Provider change other than capacity (or a create/delete)."""
PROVIDER_CAPACITY_CHANGED: Final = Projected(provider_capacity)
"""A change of its domains' capacity (or a create/delete)."""
