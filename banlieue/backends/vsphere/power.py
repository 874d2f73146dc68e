"""Power operations (SPEC §3: ``powerOffMode hard|soft|trySoft``, guest soft power-off timeout).

- hard: PowerOffVM_Task.
- soft: ShutdownGuest (needs VMware Tools), then watch runtime.powerState with back-off up to
  ``soft_timeout`` s; if still on, report it (the caller looks again later).
- trySoft: soft, then hard when the timeout passes or Tools are unavailable (CAPV semantics).
Suspended VMs are powered off hard (a suspended guest cannot shut down).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pyVmomi import vim as _vim

from banlieue.backends.base import BackendError, PowerOffMode, PowerState
from banlieue.backends.vsphere.faults import map_exception
from banlieue.backends.vsphere.properties import retrieve_objects
from banlieue.backends.vsphere.session import Session
from banlieue.backends.vsphere.tasks import SIGNAL_FALLBACK, Runner, wait_task

# pyVmomi's partial stubs make its constructors untyped calls; treat the namespaces as Any.
vim: Any = _vim

_STATE = {"poweredOn": "PoweredOn", "poweredOff": "PoweredOff", "suspended": "Suspended"}


async def power_state(run: Runner, vm: Any) -> PowerState:
    def read(s: Session) -> str:
        return str(retrieve_objects(s.content, [vm], vim.VirtualMachine, ["runtime.powerState"])[0].get("runtime.powerState"))

    state = _STATE.get(await run(read), "PoweredOff")
    return state  # type: ignore[return-value]


async def _shutdown_guest(run: Runner, vm: Any, soft_timeout: float) -> bool:
    """ShutdownGuest then wait; True when the VM is off within ``soft_timeout`` s.
    Raises BackendError(reason="ToolsUnavailable") when the guest cannot be asked."""

    def shutdown(s: Session) -> None:
        try:
            vm.ShutdownGuest()
        except vim.fault.ToolsUnavailable as exc:
            raise BackendError("VMware Tools are not running: cannot shut the guest down", reason="ToolsUnavailable", public=True) from exc

    await run(shutdown)
    deadline = time.monotonic() + soft_timeout
    delay = 0.1
    while True:
        if await power_state(run, vm) == "PoweredOff":
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(min(delay, max(deadline - time.monotonic(), 0)))
        delay = min(delay * 2, 5.0)


async def set_power(
    run: Runner,
    vm: Any,
    want: PowerState,
    off_mode: PowerOffMode,
    soft_timeout: float,
    task_timeout: float,
    provider: str,
    have: PowerState | None = None,
    powered_on: asyncio.Event | None = None,
    signal_fallback: float = SIGNAL_FALLBACK,
) -> None:
    """Drive ``vm`` towards ``want``; returns when done (or when a soft power-off timed out).
    ``provider`` (``namespace/name``) labels the tasks-in-flight gauge.
    ``have`` is the power state just read, if the caller has it (saves one request).
    ``powered_on``: set by the change watch when it sees the VM powered on; a PowerOnVM_Task
    (``want`` PoweredOn) is then done without polling it (``tasks.wait_task``'s ``signal``), unless
    it is not set within ``signal_fallback`` seconds."""
    if have is None:
        have = await power_state(run, vm)
    if have == want:
        return

    async def task(method: str, what: str, signal: asyncio.Event | None = None) -> None:
        t = await run(lambda s: getattr(vm, method)())
        await wait_task(run, t, what, task_timeout, provider, signal, signal_fallback=signal_fallback)

    if want == "PoweredOn":
        await task("PowerOnVM_Task", "power on", powered_on)
    elif want == "Suspended":
        if have == "PoweredOff":
            await task("PowerOnVM_Task", "power on before suspend")
        await task("SuspendVM_Task", "suspend")
    elif have == "Suspended" or off_mode == "hard":
        await task("PowerOffVM_Task", "power off")
    else:
        try:
            done = await _shutdown_guest(run, vm, soft_timeout)
        except BackendError as exc:
            if off_mode == "soft" or exc.reason != "ToolsUnavailable":
                raise
            done = False
        if not done and off_mode == "trySoft" and await power_state(run, vm) != "PoweredOff":
            try:
                await task("PowerOffVM_Task", "power off after guest shutdown timeout")
            except BackendError as exc:
                # The guest may have finished shutting down between the read and the call.
                if map_exception(exc).reason != "InvalidPowerState":
                    raise
