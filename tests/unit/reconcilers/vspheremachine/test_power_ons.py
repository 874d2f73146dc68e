"""Background power-ons (banlieue.reconcilers.vspheremachine.power_ons): one per machine, its end
wakes the machine, a failure is handed to the next reconcile once, and stopping the wake
channel stops following them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from banlieue.backends.base import TaskFailed, VMInfo
from banlieue.reconcilers.vspheremachine.power_ons import PowerOns
from banlieue.runtime import Request

M1 = Request("ns", "m1")


def info() -> VMInfo:
    return VMInfo(uid="u1", moref="vm-1", name="m1", power_state="PoweredOn", bios_uuid="b", instance_uuid="i",
                  num_cpus=1, num_cores_per_socket=1, memory_mib=256, disks_gib=(), nics=(), ip_address=None)


@contextlib.asynccontextmanager
async def channel(p: PowerOns) -> AsyncIterator[asyncio.Queue[Request]]:
    """Run ``p``'s wake channel; the requests it yields go to the queue returned."""
    woken: asyncio.Queue[Request] = asyncio.Queue()
    gen = p.requests()

    async def pump() -> None:
        async for req in gen:
            woken.put_nowait(req)

    task = asyncio.create_task(pump())
    await asyncio.sleep(0)  # the generator is running: its wake callback is set
    try:
        yield woken
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await gen.aclose()


async def test_without_the_wake_channel_nothing_is_followed() -> None:
    p = PowerOns()
    assert not p.waking
    with pytest.raises(RuntimeError, match="wake channel"):
        p.start(M1, "u1", lambda: asyncio.sleep(0, info()), lambda _: None)


async def test_a_success_calls_on_done_then_wakes_the_machine() -> None:
    p = PowerOns()
    release = asyncio.Event()
    done: list[VMInfo] = []

    async def power_on() -> VMInfo:
        await release.wait()
        return info()

    async with channel(p) as woken:
        assert p.waking
        p.start(M1, "u1", power_on, done.append)
        assert p.running("u1")
        with pytest.raises(RuntimeError, match="already"):
            p.start(M1, "u1", power_on, done.append)
        await asyncio.sleep(0.05)
        assert woken.empty() and done == []
        release.set()
        assert await asyncio.wait_for(woken.get(), 1.0) == M1
        assert not p.running("u1") and [i.power_state for i in done] == ["PoweredOn"]
        assert p.take("u1") is None


async def test_a_failure_is_kept_for_the_next_reconcile_once() -> None:
    p = PowerOns()

    async def refused() -> VMInfo:
        raise TaskFailed("InsufficientResourcesFault", reason="InsufficientResourcesFault")

    done: list[VMInfo] = []
    async with channel(p) as woken:
        p.start(M1, "u1", refused, done.append)
        assert await asyncio.wait_for(woken.get(), 1.0) == M1
        failed = p.take("u1")
        assert isinstance(failed, TaskFailed) and failed.reason == "InsufficientResourcesFault"
        assert p.take("u1") is None, "a failure is handed over once"
        assert done == []


async def test_forget_drops_a_kept_failure() -> None:
    p = PowerOns()

    async def refused() -> VMInfo:
        raise TaskFailed("no", reason="TaskFailed")

    async with channel(p) as woken:
        p.start(M1, "u1", refused, lambda _: None)
        await asyncio.wait_for(woken.get(), 1.0)
        p.forget("u1")
        assert p.take("u1") is None


async def test_stopping_the_channel_cancels_what_is_followed() -> None:
    p = PowerOns()
    cancelled = asyncio.Event()

    async def hangs() -> VMInfo:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return info()

    async with channel(p):
        p.start(M1, "u1", hangs, lambda _: None)
        await asyncio.sleep(0)
    await asyncio.wait_for(cancelled.wait(), 1.0)
    await asyncio.sleep(0)
    assert not p.waking and not p.running("u1")
