"""Provider deletion, pure part: which VSphereMachines use a Provider, and the deletion Plan.

A Provider is the only way to reach its vCenter: the credentials, the endpoint and the failure
domains (``status.failureDomains``) the VSphereMachine reconciler resolves placements through.
Deleting it while machines still run there would leave their VMs in vCenter (the machine
finalizer could no longer reach them). So, like a PersistentVolume's ``kubernetes.io/pv-protection``
finalizer (kube "Storage Object in Use Protection"):

- The provider role adds ``FINALIZER_PROVIDER`` (``banlieue.io/provider``) to every Provider of
  class ``vsphere`` that is not being deleted.
- A deleting Provider keeps its finalizer while any VSphereMachine of its namespace uses it
  (``machine_uses_provider``): ``Ready`` False, reason ``Deleting``, the message naming how many
  machines (and the first few names); ``ProviderReachable`` and ``status.failureDomains`` are
  kept, so those machines keep working and can still be deleted.
- When none uses it, the finalizer is dropped (the API server then removes the Provider).

*decision*: this holds even when ``spec.paused`` is set (a pause must not make deletion leak VMs,
and dropping the finalizer of an unused Provider touches no vCenter).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from banlieue.api.conditions import READY, get_condition, set_condition
from banlieue.api.provider import Provider, ProviderConditionReason, ProviderStatus
from banlieue.reconcilers.kinds import FINALIZER_PROVIDER

USERS_IN_MESSAGE = 5
"""How many machine names the ``Deleting`` message lists."""
DELETING_RESYNC_SECONDS = 60.0
"""Safety re-check of a deleting Provider still in use (machine deletions are watched)."""


def machine_uses_provider(machine: Mapping[str, Any], provider: Provider) -> bool:
    """Whether the VSphereMachine ``machine`` (wire dict) uses ``provider``: same namespace and
    ``spec.providerRef.name`` names it, or (no providerRef) one of its failure domains
    (``spec.failureDomain``, ``status.failureDomain``: where the machine was placed, also on the
    CAPI path) is in the Provider's ``status.failureDomains``."""
    meta = machine.get("metadata") or {}
    if meta.get("namespace") != provider.metadata.namespace:
        return False
    spec = machine.get("spec") or {}
    ref = (spec.get("providerRef") or {}).get("name")
    if ref:
        return bool(ref == provider.metadata.name)
    names = {n for n in (spec.get("failureDomain"), (machine.get("status") or {}).get("failureDomain")) if n}
    if not names or provider.status is None:
        return False
    return any(fd.name in names for fd in provider.status.failure_domains or ())


@dataclass(frozen=True)
class DeletionEvent:
    """An Event to record on the Provider."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class DeletionPlan:
    """What to do with a deleting Provider: ``status`` the full desired status (``write_status``
    False when unchanged), ``remove_finalizer``, Events, ``requeue_after`` seconds (None: none)."""

    status: ProviderStatus
    write_status: bool
    remove_finalizer: bool
    events: tuple[DeletionEvent, ...] = ()
    requeue_after: float | None = None


def decide_deletion(provider: Provider, users: Sequence[str], now: datetime) -> DeletionPlan:
    """The plan for ``provider`` (deletionTimestamp set) given the sorted names of the
    VSphereMachines that still use it. Never raises. Rules: module docstring."""
    current = provider.status or ProviderStatus()
    has_finalizer = FINALIZER_PROVIDER in (provider.metadata.finalizers or ())
    gen = provider.metadata.generation
    if users:
        shown = ", ".join(users[:USERS_IN_MESSAGE]) + (", ..." if len(users) > USERS_IN_MESSAGE else "")
        message = (
            f"deletion waits for {len(users)} VSphereMachine(s) that still use this Provider ({shown}): "
            "delete them first; their VMs are destroyed through this Provider"
        )
    else:
        message = "no VSphereMachine uses this Provider: removing it"
    conds = set_condition(current.conditions, READY, False, ProviderConditionReason.DELETING, message, gen, now)
    status = ProviderStatus(failure_domains=current.failure_domains, conditions=conds, observed_generation=gen,
                            vcenter=current.vcenter)
    # status.images is the VMImage controller's (its own field manager): not this writer's.
    write = status.to_wire() != current.model_copy(update={"images": None}).to_wire()
    old = get_condition(current.conditions, READY)
    events: tuple[DeletionEvent, ...] = ()
    if users and (old is None or old.reason != ProviderConditionReason.DELETING):
        events = (DeletionEvent("Normal", ProviderConditionReason.DELETING, message),)
    if users:
        return DeletionPlan(status, write, remove_finalizer=False, events=events, requeue_after=DELETING_RESYNC_SECONDS)
    # Nothing uses it: the status write would be lost with the object; only drop the finalizer.
    return DeletionPlan(status, write_status=False, remove_finalizer=has_finalizer)
