"""The one InfraMachine accessor (the design page's ``InfraMachineRead``).

The VirtualMachine reconciler reads the VSphereMachine it owns only through ``InfraMachineRead``,
so the CAPI v1beta2 InfraMachine contract fields it mirrors are named in one place (design page
"Relationship to Cluster API": status.initialization.provisioned, status.addresses,
status.conditions[Ready], spec.providerID, spec/status.failureDomain). When the contract moves
(v1beta2 -> v1), only this module changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from banlieue.api.conditions import READY, get_condition
from banlieue.api.infrastructure import VSphereMachine
from banlieue.api.meta import Condition, MachineAddress
from banlieue.api.virtualmachine import PowerState


@dataclass(frozen=True)
class InfraMachineRead:
    """What the VirtualMachine mirrors from its InfraMachine.

    ``provisioned``: status.initialization.provisioned (False when absent). ``addresses``:
    status.addresses. ``failure_domain``: status.failureDomain, else spec.failureDomain.
    ``provider_id``: spec.providerID. ``ready``: the Ready condition (None when not reported
    yet). ``power_state``: status.powerState. ``deleting``: metadata.deletionTimestamp is set.
    ``provider_name``: spec.providerRef.name.
    """

    name: str
    provisioned: bool = False
    addresses: tuple[MachineAddress, ...] = ()
    failure_domain: str | None = None
    provider_id: str | None = None
    ready: Condition | None = None
    power_state: PowerState | None = None
    deleting: bool = False
    provider_name: str | None = None

    @classmethod
    def from_machine(cls, machine: VSphereMachine) -> InfraMachineRead:
        """Read a parsed VSphereMachine."""
        status = machine.status
        spec = machine.spec
        return cls(
            name=machine.metadata.name or "",
            provisioned=bool(status and status.initialization and status.initialization.provisioned),
            addresses=tuple((status.addresses if status else None) or ()),
            failure_domain=(status.failure_domain if status else None) or spec.failure_domain,
            provider_id=spec.provider_id,
            ready=get_condition(status.conditions if status else None, READY),
            power_state=status.power_state if status else None,
            deleting=machine.metadata.deletion_timestamp is not None,
            provider_name=spec.provider_ref.name if spec.provider_ref else None,
        )

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> InfraMachineRead | None:
        """Read a VSphereMachine as the API returns it; None when it does not parse (a
        malformed object is treated as not there yet rather than failing the reconcile)."""
        try:
            return cls.from_machine(VSphereMachine.from_wire(raw))
        except ValidationError:
            return None
