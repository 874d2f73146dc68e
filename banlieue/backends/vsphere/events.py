"""What vCenter's event history says about clones (issue 19; ADR 0012).

A CloneVM_Task runs on the *template*, so neither its task (``TaskInfo.entity`` is the template)
nor the VM (it exists only once the clone lands) names the machine while the clone runs. The
event vCenter posts when it starts a clone does: ``VmBeingClonedEvent`` (``vm`` = the source,
``destName`` = the new VM's name; vcsim posts it when the call is accepted, vCenter when the
task starts). ``VmClonedEvent`` (``vm`` = the new VM, ``sourceVm`` = the source) is posted once
the clone landed. Both stay in the event history after their task is forgotten (vCenter keeps
events for 30 days by default). One ``QueryEvents`` call reads them (at most ``MAX_EVENTS``,
the newest; filtered by type and time, or by entity), creating no collector.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pyVmomi import vim as _vim
from pyVmomi import vmodl as _vmodl

from banlieue.backends.vsphere.properties import moid

vim: Any = _vim
vmodl: Any = _vmodl

NO_HISTORY = (vmodl.fault.NotImplemented, vmodl.fault.NotSupported, vmodl.fault.MethodNotFound)
"""Faults of an endpoint that keeps no event history (an ESXi host, vcsim in ESX mode): the
callers then know nothing more than without the history."""

MAX_EVENTS = 1000
"""Events one QueryEvents returns at most (``EventFilterSpec.maxCount``; vCenter's ceiling)."""
CLOCK_MARGIN = timedelta(seconds=60)
"""Read events that far before the time asked for: the manager's clock and vCenter's differ."""


@dataclass(frozen=True)
class CloneEvent:
    """A ``VmBeingClonedEvent``: ``source`` (managed object of the VM or template cloned),
    ``dest_name`` and vCenter's ``created`` time."""

    source: Any
    dest_name: str
    created: datetime


def clones_started(content: Any, dest_name: str, since: datetime) -> list[CloneEvent]:
    """The clones into a VM named ``dest_name`` that vCenter started since ``since`` (minus
    ``CLOCK_MARGIN``), oldest first: 1 call."""
    spec = vim.event.EventFilterSpec(eventTypeId=["VmBeingClonedEvent"], maxCount=MAX_EVENTS,
                                     time=vim.event.EventFilterSpec.ByTime(beginTime=since - CLOCK_MARGIN))
    out = []
    try:
        found = content.eventManager.QueryEvents(spec) or []
    except NO_HISTORY:
        return []
    for event in found:
        if isinstance(event, vim.event.VmBeingClonedEvent) and event.destName == dest_name and event.vm is not None:
            out.append(CloneEvent(source=event.vm.vm, dest_name=str(event.destName), created=event.createdTime))
    return sorted(out, key=lambda e: e.created)


def cloned_from(content: Any, vm: Any) -> Any | None:
    """The managed object the VM ``vm`` was cloned from, by its ``VmClonedEvent`` (None when the
    history has none: created otherwise, or the event expired): 1 call."""
    spec = vim.event.EventFilterSpec(
        eventTypeId=["VmClonedEvent"], maxCount=MAX_EVENTS,
        entity=vim.event.EventFilterSpec.ByEntity(entity=vm, recursion="self"))
    try:
        found = content.eventManager.QueryEvents(spec) or []
    except NO_HISTORY:
        return None
    for event in found:
        if isinstance(event, vim.event.VmClonedEvent) and event.vm is not None and moid(event.vm.vm) == moid(vm):
            return event.sourceVm.vm if event.sourceVm is not None else None
    return None


def ever_powered_on(content: Any, vm: Any) -> bool:
    """Whether the history records the VM ``vm`` starting or powered on (``VmStartingEvent``,
    ``VmPoweredOnEvent``): 1 call. A VM never powered on holds no guest state. True when the
    endpoint keeps no history."""
    spec = vim.event.EventFilterSpec(
        eventTypeId=["VmStartingEvent", "VmPoweredOnEvent"], maxCount=1,
        entity=vim.event.EventFilterSpec.ByEntity(entity=vm, recursion="self"))
    try:
        return bool(content.eventManager.QueryEvents(spec))
    except NO_HISTORY:
        return True  # unknown: assume it ran (never destroy on a guess)
